"""What every local worker process does before Beam's harness runs in it, forked (``forked_workers``) or started
(``worker_main``): one list, so that both kinds of worker are set up alike.

Invariant: only worker processes call it, never a user's process.
"""

from __future__ import annotations

from beam_tfrecord.engine.state_sampling import sample_states_often
from beam_tfrecord.engine.worker_memory import freeze_start_heap, keep_freed_memory
from beam_tfrecord.engine.worker_stderr import drop_typed_error_tracebacks, end_quietly_on_interrupt


def prepare_worker_process() -> None:
    """Sets this process up as a local worker: its memory, its terminal, its start heap frozen (last but the
    sampler: what exists then is what a full collection skips), its state samplers' period."""
    keep_freed_memory()
    drop_typed_error_tracebacks()
    end_quietly_on_interrupt()
    freeze_start_heap()
    sample_states_often()
