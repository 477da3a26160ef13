import asyncio, threading, time, sys, os, socket
async def main(n, mode):
    loop = asyncio.get_running_loop()
    async def serve(x): return x + 1
    done = loop.create_future()
    class Box:
        __slots__ = ("lock", "value", "task")
    r, w = os.pipe()
    async def serve2(box, x):
        box.value = await serve(x)
        if mode == "lean": box.lock.release()
        else: os.write(w, b"x")
    def start(box, x):
        box.task = loop.create_task(serve2(box, x))
    def worker():
        t = time.perf_counter()
        for i in range(n):
            b = Box()
            if mode == "lean":
                b.lock = threading.Lock(); b.lock.acquire()
            loop.call_soon_threadsafe(start, b, i)
            if mode == "lean": b.lock.acquire()
            else: os.read(r, 1)
        loop.call_soon_threadsafe(done.set_result, (time.perf_counter() - t) / n * 1e6)
    c0 = time.process_time()
    threading.Thread(target=worker).start()
    us = await done
    print(f"{mode}: round trip {us:.1f} us, cpu/rt {(time.process_time()-c0)/n*1e6:.1f} us")
asyncio.run(main(int(sys.argv[1]), sys.argv[2]))
