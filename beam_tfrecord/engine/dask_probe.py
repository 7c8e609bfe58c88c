"""Asks a Dask cluster's workers whether they see this machine's local paths (``worker_placement``).

The client writes a random token beside each path; every worker must read it back and see each existing path.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import secrets
from collections.abc import Iterator, Sequence

PROBE_TIMEOUT_S = 5.0  # connect and ask; a worker that has not answered by then does not count as seeing the paths
TOKEN_PREFIX = ".beam-tfrecord-probe-"


def unseen_paths(seen: Sequence[tuple[str, bool]], tokens: Sequence[tuple[str, str]]) -> list[str]:
    """Runs on a worker: the paths among ``seen`` (path, exists on the client) and ``tokens`` (file, content)
    that this worker sees otherwise than the client."""
    unseen = [path for path, exists in seen if os.path.exists(path) != exists]
    for token, content in tokens:
        try:
            with open(token, encoding="ascii") as file:
                if file.read() == content:
                    continue
        except OSError:
            pass  # reported below, as unseen
        unseen.append(os.path.dirname(token))
    return unseen


def _nearest_folder(path: str) -> str:
    folder = os.path.dirname(os.path.abspath(path))
    while not os.path.isdir(folder):
        folder = os.path.dirname(folder)
    return folder


@contextlib.contextmanager
def _tokens_beside(paths: Sequence[str]) -> Iterator[list[tuple[str, str]]]:
    """Writes one random token in the nearest existing folder above each path; removes them after."""
    written: list[tuple[str, str]] = []
    try:
        for folder in dict.fromkeys(_nearest_folder(path) for path in paths):
            token, content = os.path.join(folder, TOKEN_PREFIX + secrets.token_hex(8)), secrets.token_hex(16)
            with contextlib.suppress(OSError):  # a read-only folder: the workers' view of the paths still counts
                with open(token, "x", encoding="ascii") as file:
                    file.write(content)
                written.append((token, content))
        yield written
    finally:
        for token, _ in written:
            with contextlib.suppress(FileNotFoundError):
                os.remove(token)


def _ask_workers(address: str | None, scheduler_file: str | None, seen: list[tuple[str, bool]],
                 tokens: list[tuple[str, str]]) -> dict[str, object]:
    from distributed import Client

    with Client(address, scheduler_file=scheduler_file, timeout=PROBE_TIMEOUT_S, set_as_default=False) as client:
        return client.run(unseen_paths, seen, tokens, on_error="return")


def workers_unseen_reason(paths: Sequence[str], *, address: str | None, scheduler_file: str | None) -> str | None:
    """None when every worker of the Dask cluster at ``address`` (or ``scheduler_file``) sees ``paths`` as
    this machine does; else why not, naming the workers and the paths they miss."""
    scheduler = address or scheduler_file
    seen = [(path, os.path.exists(path)) for path in paths]
    with _tokens_beside(paths) as tokens:
        pool = concurrent.futures.ThreadPoolExecutor(1)  # not ``with``: its exit would wait for a hung call
        try:
            answers = pool.submit(_ask_workers, address, scheduler_file, seen, tokens).result(
                timeout=PROBE_TIMEOUT_S * 2)
        except Exception as err:  # no answer in time, or no cluster there: the paths cannot be shown shared
            return (f"the DaskRunner runs on the Dask scheduler {scheduler}, which did not say what its workers "
                    f"see ({type(err).__name__}: {err})")
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
    if not answers:
        return f"the DaskRunner runs on the Dask scheduler {scheduler}, which has no workers to ask"
    missing = {worker: _what_is_missed(answer, paths) for worker, answer in sorted(answers.items())}
    details = "; ".join(f"{worker} {what}" for worker, what in missing.items() if what)
    if not details:
        return None
    return f"the DaskRunner runs on the Dask scheduler {scheduler}, whose workers do not share this disk ({details})"


def _what_is_missed(answer: object, paths: Sequence[str]) -> str:
    """A worker's answer as the paths it cannot see (a folder whose token it could not read hides each path
    below it); empty when it sees them all."""
    if not isinstance(answer, list):
        return f"failed: {answer!r}"
    unseen = set(answer)
    missed = [path for path in paths if path in unseen or _nearest_folder(path) in unseen]
    return ("cannot see " + ", ".join(repr(path) for path in missed)) if missed else ""
