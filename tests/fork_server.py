"""DataLoader workers that do not inherit the test process, for loaders whose workers open ArrayRecord shards.

The suite's processes write and read ArrayRecord files, and riegeli's background cleaner (a thread and a mutex) does
not survive a fork: a forked worker opening an ArrayRecord shard crashed now and then (SIGSEGV in
absl::Mutex::UnlockSlow from riegeli::BackgroundCleaner, from a core dump; docs/reading.md, "ArrayRecord and
forked workers"). Workers from a fork server preloaded with torch and the reader start as fast as forked ones.
"""

import multiprocessing

FORK_SERVER = multiprocessing.get_context("forkserver")
FORK_SERVER.set_forkserver_preload(["torch", "beam_tfrecord.reader.torch_dataset"])
