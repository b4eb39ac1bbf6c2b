"""A consumer of the events topic, as a team downstream would run one: the
drain and the end-to-end sale ask it when their last CREATED event came."""
import re
import subprocess
import threading
import time

from benchmarks.common import BIN, ENV, PROCS, RUN

# The run's one watcher, started by the runner before any order is taken.
WATCHER = None


def watch_events():
    """Starts the run's watcher."""
    global WATCHER
    WATCHER = EventWatcher()
    return WATCHER


def watcher():
    """The run's watcher (started first by the runner)."""
    return WATCHER


class EventWatcher:
    """A consumer of the events topic (`seckillctl events tail`, a group of
    its own), started once and reading as events come, as a team downstream
    would: it counts each sale's CREATED events and notes when the last of
    each came."""

    def __init__(self):
        self.counts, self.last = {}, {}
        self.changed = threading.Condition()
        self.proc = subprocess.Popen([str(BIN / "seckillctl"), "events", "tail", "--json", "--group", f"{RUN}-watch",
                                      "--idle", "3600"], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        PROCS.append(self.proc)
        threading.Thread(target=self.read, daemon=True).start()

    def read(self):
        for line in self.proc.stdout:
            line = line.replace(" ", "")
            if '"type":"CREATED"' not in line:
                continue
            found = re.search(r'"activityId":(\d+)', line)
            if not found:
                continue
            with self.changed:
                activity = int(found.group(1))
                self.counts[activity] = self.counts.get(activity, 0) + 1
                self.last[activity] = time.time()
                self.changed.notify_all()

    def seen(self, activities):
        with self.changed:
            return sum(self.counts.get(a, 0) for a in activities)

    def wait(self, activities, wanted, seconds):
        """When the last of `wanted` CREATED events of `activities` came
        (None if they did not within `seconds`)."""
        with self.changed:
            reached = self.changed.wait_for(lambda: sum(self.counts.get(a, 0) for a in activities) >= wanted, seconds)
            return max(self.last.get(a, 0) for a in activities) if reached else None
