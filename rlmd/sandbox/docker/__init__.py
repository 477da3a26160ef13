"""The container transport: the kernel in a warm, hardened docker container.

``transport.py`` talks to one container's kernel, ``attach.py`` carries its channel over the
attach socket, ``launch.py`` creates containers (and keeps a spare), ``engine.py`` is the
docker engine (client, labels, orphan reaping), ``images.py`` builds the template images and
``reaper.py`` reaps orphans at daemon start. Nothing here is imported until a container
sandbox is made: the docker SDK is an optional extra (the reaper checks for it first).
"""
