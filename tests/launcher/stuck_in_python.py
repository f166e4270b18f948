# A Python worker that beats by touching its DDPRUN_HEARTBEAT_FILE every 0.1 s, until rank 1,
# at its sixth beat, stops in stuck_in_python(): the frame the hang tests look for in its stacks.
import os, time
def stuck_in_python():
    while True:
        time.sleep(3600)
for n in range(1000000):
    os.utime(os.environ["DDPRUN_HEARTBEAT_FILE"])
    if os.environ["RANK"] == "1" and n == 5:
        stuck_in_python()
    time.sleep(0.1)
