import asyncio, os, threading, time, statistics
K = 5000
async def main():
    loop = asyncio.get_running_loop()
    r, w = os.pipe()
    done = loop.create_future()
    def on_loop():
        os.write(w, b"\0")
    def thread():
        t0 = time.perf_counter()
        for _ in range(K):
            loop.call_soon_threadsafe(on_loop)
            os.read(r, 1)
        loop.call_soon_threadsafe(done.set_result, (time.perf_counter() - t0) / K)
    c0 = time.process_time()
    threading.Thread(target=thread).start()
    dt = await done
    print(f"raw round trip {dt*1e6:.1f} us, cpu {(time.process_time()-c0)/K*1e6:.1f} us")
    # with a task per call, new pipe per call
    done2 = loop.create_future()
    async def serve(w2):
        os.write(w2, b"\0"); os.close(w2)
    def start(w2):
        loop.create_task(serve(w2))
    def thread2():
        t0 = time.perf_counter()
        for _ in range(K):
            r2, w2 = os.pipe()
            loop.call_soon_threadsafe(start, w2)
            os.read(r2, 1); os.close(r2)
        loop.call_soon_threadsafe(done2.set_result, (time.perf_counter() - t0) / K)
    c0 = time.process_time()
    threading.Thread(target=thread2).start()
    dt = await done2
    print(f"task+pipe per call round trip {dt*1e6:.1f} us, cpu {(time.process_time()-c0)/K*1e6:.1f} us")
asyncio.run(main())
