"""Cloud VM backends: the kernel in an E2B microVM (``e2b.py``) or a Modal sandbox
(``modal.py``), both driven by the shared :class:`~rlmd.sandbox.cloud.transport.CloudTransport`
through a small :class:`~rlmd.sandbox.cloud.provider.Provider` adapter. The provider SDKs
are optional extras, imported only when a sandbox is created."""
