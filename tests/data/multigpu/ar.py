import os, time, torch, torch.distributed as dist
rank = int(os.environ["RANK"]); ws = int(os.environ["WORLD_SIZE"])
torch.cuda.set_device(rank)
t0 = time.time(); dist.init_process_group("nccl", device_id=torch.device("cuda", rank)); t1 = time.time()
res = []
for nbytes in (1 << 20, 64 << 20, 1 << 30):
    x = torch.full((nbytes // 4,), float(rank + 1), device="cuda")
    for _ in range(3): dist.all_reduce(x)
    torch.cuda.synchronize(); x.fill_(rank + 1)
    iters = 20 if nbytes <= (64 << 20) else 5
    dist.barrier(); torch.cuda.synchronize()
    s = time.perf_counter()
    for _ in range(iters): dist.all_reduce(x)
    torch.cuda.synchronize(); e = (time.perf_counter() - s) / iters
    algbw = nbytes / e / 1e9; busbw = algbw * 2 * (ws - 1) / ws
    res.append((nbytes, round(e * 1e6, 1), round(algbw, 1), round(busbw, 1)))
ok = True
y = torch.full((1024,), float(rank + 1), device="cuda"); dist.all_reduce(y); ok = bool((y == ws * (ws + 1) / 2).all())
if rank == 0: print("RESULT init_s=%.2f ok=%s %s" % (t1 - t0, ok, res), flush=True)
dist.destroy_process_group()
