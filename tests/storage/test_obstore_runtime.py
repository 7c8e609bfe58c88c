"""obstore in a forked process (``storage/obstore_runtime.py``): a request there answers, whoever started the
parent's runtime, and a child of a parent that never loaded obstore uses the installed one.

Each case is a fresh interpreter (pytest's own process may have made requests already) that forks once; the child
asks a port where nothing listens, so the answer (an HTTP error: refused) needs a live runtime and no server. Before
the fix the child waited forever: its faulthandler ends it after ``HANG_SECONDS``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from fixtures_gcs import free_port

HANG_SECONDS = 20
SCRIPT = textwrap.dedent("""
    import faulthandler, json, os, sys
    from beam_tfrecord.storage.obstore_runtime import extension

    parent_request, port = sys.argv[1], int(sys.argv[2])
    if parent_request == "through the library":
        module = extension()
        module.put(module._store.MemoryStore(), "a", b"x")
    elif parent_request == "by the user's own obstore":
        import obstore
        from obstore.store import MemoryStore
        obstore.put(MemoryStore(), "a", b"x")
    read, write = os.pipe()
    if os.fork() == 0:
        faulthandler.dump_traceback_later({hang}, exit=True)
        module = extension()
        store = module._store.HTTPStore.from_url(f"http://127.0.0.1:{{port}}", client_options={{"allow_http": True}},
                                                 retry_config={{"max_retries": 0}})
        try:
            module.get(store, "missing")
            answer = "no error"
        except Exception as err:
            answer = type(err).__name__ + ": " + str(err)[:300]
        import obstore
        modules_kept = sys.modules["obstore.exceptions"] is obstore._obstore.exceptions
        os.write(write, json.dumps({{"private_copy": module is not obstore._obstore, "answer": answer,
                                     "modules_kept": modules_kept}}).encode())
        os._exit(0)
    os.close(write)
    print(os.read(read, 1 << 16).decode())
""").format(hang=HANG_SECONDS)


@pytest.mark.parametrize(("parent_request", "private_copy"), [
    ("through the library", True),
    ("by the user's own obstore", True),  # obstore loaded in the parent: its runtime may have started
    ("none", False),  # obstore never loaded in the parent: the child starts the installed one's runtime
])
def test_a_forked_child_gets_an_answer_from_a_live_runtime(parent_request: str, private_copy: bool) -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT, parent_request, str(free_port())], capture_output=True,
                          text=True, timeout=HANG_SECONDS + 40, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    child = json.loads(done.stdout)
    assert child["private_copy"] is private_copy
    assert child["answer"].startswith("GenericError: Generic HTTP error: Error performing GET"), child["answer"]
    assert child["modules_kept"]  # the copy's submodules did not replace the installed obstore's
