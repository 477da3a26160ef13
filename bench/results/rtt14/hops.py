import asyncio, time
async def main():
    loop = asyncio.get_running_loop()
    N = 50000
    # 1 hop: await a future set from a call_soon callback
    t = time.process_time()
    for _ in range(N):
        f = loop.create_future(); loop.call_soon(f.set_result, None); await f
    one = (time.process_time() - t) / N
    t = time.process_time()
    for _ in range(N):
        f = loop.create_future(); w = loop.create_future()
        def wake(_=None, w=w):
            if not w.done(): w.set_result(None)
        h = loop.call_later(30, wake); f.add_done_callback(wake)
        loop.call_soon(f.set_result, None); await w
        h.cancel(); f.remove_done_callback(wake)
    two = (time.process_time() - t) / N
    t = time.process_time()
    for _ in range(N):
        f = loop.create_future()
        h = loop.call_later(30, lambda: None)
        loop.call_soon(f.set_result, None); await f
        h.cancel()
    onet = (time.process_time() - t) / N
    print(f"1 hop {one*1e6:.2f} us; waiter+timer 2 hops {two*1e6:.2f} us; 1 hop + timer {onet*1e6:.2f} us")
asyncio.run(main())
