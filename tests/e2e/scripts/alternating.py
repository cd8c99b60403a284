"""A user's program adapted to the trainer API whose stage times alternate which stage leads:
`alternating.py LEAD FLIP`: for FLIP iterations its io and cpu stages take 40 ms and its gpu
stage 5 ms (LEAD "io"), then the other way round (gpu and cpu 40 ms, io 5 ms), and so on.
Two of them started with different leads, in one group, make the planner's best slot order
flip at each turn, which is what a test needs to see regroups done in place."""
import sys
import time

from trainer import api

LONG, SHORT = 0.04, 0.005
lead, flip = sys.argv[1], int(sys.argv[2])
job = api.job()
start, _ = job.resume()
job.autosave(lambda: {}, every=5)
for step in range(int(start), int(job.iterations)):
    io_leads = (step // flip) % 2 == (0 if lead == "io" else 1)
    with job.stage("io"):
        time.sleep(LONG if io_leads else SHORT)
    with job.stage("cpu"):
        time.sleep(LONG)
    with job.stage("gpu"):
        time.sleep(SHORT if io_leads else LONG)
    with job.stage("net"):
        time.sleep(SHORT)
    job.step()
    if job.should_stop():
        sys.exit(job.stop(step + 1, {}))
sys.exit(job.finish(job.iterations, {}))
