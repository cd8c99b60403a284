"""A user's program adapted to the trainer API, as small as one can be: each iteration takes
its turns on io and gpu (a few ms each), saves its progress every 5 iterations, and stops
when asked. Tests use it to see what a gate does to programs that take turns."""
import sys
import time

from trainer import api

job = api.job()
start, _ = job.resume()
job.autosave(lambda: {}, every=5)
for step in range(int(start), int(job.iterations)):
    with job.stage("io"):
        time.sleep(0.003)
    with job.stage("gpu"):
        time.sleep(0.003)
    job.step()
    if job.should_stop():
        sys.exit(job.stop(step + 1, {}))
sys.exit(job.finish(job.iterations, {}))
