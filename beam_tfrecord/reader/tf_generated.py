"""A Python iterator as a ``tf.data.Dataset`` without ``Dataset.from_generator``, whose op slows tf.data down.

That op calls ``mallopt(M_MMAP_THRESHOLD, 128 KiB)`` for the whole process (docs/performance.md, "Reading from
a bucket"). Each pass is a new iteration, closed when read to its end or when too many are open.
"""

from __future__ import annotations

import collections
import itertools
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from beam_tfrecord.errors import ReaderError
from beam_tfrecord.reader.tf_spec import tf  # imports TensorFlow quietly

MAX_LIVE_ITERATIONS = 2  # open iterations per dataset (each may hold a fetcher's bytes in flight)


class _Iteration:
    """One pass: the Python iterator, and a lock so that it is never advanced and closed at once."""

    def __init__(self, values: Iterator[tuple[Any, ...]]) -> None:
        self.values = values
        self.lock = threading.Lock()
        self.closed = False

    def close(self) -> None:
        with self.lock:
            if not self.closed:
                self.closed = True
                close = getattr(self.values, "close", None)
                if close is not None:
                    close()


def _close_all(live: collections.OrderedDict[int, _Iteration]) -> None:
    for iteration in list(live.values()):
        iteration.close()
    live.clear()


class _Iterations:
    """The open iterations of one dataset, by token (the ``numpy_function`` calls of ``generated``)."""

    def __init__(self, make: Callable[[], Iterator[tuple[Any, ...]]], dtypes: tuple[Any, ...],
                 done_values: tuple[np.ndarray, ...]) -> None:
        self._make = make
        self._dtypes = dtypes  # each value's NumPy dtype (object for strings)
        self._done_values = done_values
        self._lock = threading.Lock()
        self._live: collections.OrderedDict[int, _Iteration] = collections.OrderedDict()
        self._tokens = itertools.count(1)
        weakref.finalize(self, _close_all, self._live)

    def _begin(self) -> int:
        """Starts an iteration (closing the least recently advanced one beyond ``MAX_LIVE_ITERATIONS``)."""
        evicted = []
        with self._lock:
            token = next(self._tokens)
            self._live[token] = _Iteration(self._make())
            while len(self._live) > MAX_LIVE_ITERATIONS:
                evicted.append(self._live.popitem(last=False)[1])
        for iteration in evicted:
            iteration.close()
        return token

    def step(self, state: np.int64) -> tuple[Any, ...]:
        """(token, done, values...) of iteration ``state`` (0: a new one, begun now): its next element, or done
        (and closed) at its end."""
        token = int(state) or self._begin()
        with self._lock:
            iteration = self._live.get(token)
            if iteration is not None:
                self._live.move_to_end(token)
        if iteration is None:
            raise ReaderError(f"this pass over the dataset was closed: {MAX_LIVE_ITERATIONS} newer passes over the "
                              "same dataset began while it was not being read (iterate it again)")
        with iteration.lock:
            if iteration.closed:
                raise ReaderError("this pass over the dataset was closed (iterate it again)")
            values = next(iteration.values, None)
        if values is None:
            with self._lock:
                self._live.pop(token, None)
            iteration.close()
            return (np.int64(token), np.bool_(True), *self._done_values)
        return (np.int64(token), np.bool_(False),
                *(np.asarray(value, dtype=dtype) for value, dtype in zip(values, self._dtypes)))


def _numpy_dtype(spec: tf.TensorSpec) -> Any:
    return object if spec.dtype == tf.string else spec.dtype.as_numpy_dtype


def _done_value(spec: tf.TensorSpec) -> np.ndarray:
    """A placeholder of ``spec``'s dtype and shape (unknown dimensions empty), given with ``done``."""
    shape = [0 if size is None else size for size in spec.shape.as_list()]
    return np.full(shape, b"" if spec.dtype == tf.string else 0, dtype=_numpy_dtype(spec))


def _as_tuples(make: Callable[[], Iterator[Any]]) -> Callable[[], Iterator[tuple[Any]]]:
    """``make``'s values as 1-tuples; closing the new iterator closes ``make``'s."""

    def tuples() -> Iterator[tuple[Any]]:
        values = make()
        try:
            for value in values:
                yield (value,)
        finally:
            close = getattr(values, "close", None)
            if close is not None:
                close()

    return tuples


def generated(make: Callable[[], Iterator[Any]],
              output_signature: tf.TensorSpec | Sequence[tf.TensorSpec]) -> tf.data.Dataset:
    """The elements of a new ``make()`` iterator on each pass, as ``from_generator(make, output_signature=...)``.

    Args:
        make: gives a new iterator for each pass over the dataset: of tuples (one value per spec), or
            of single values when ``output_signature`` is one spec.
        output_signature: each value's ``tf.TensorSpec``, or one ``tf.TensorSpec``: elements are then
            single tensors, not 1-tuples.
    """
    single = isinstance(output_signature, tf.TensorSpec)
    if single:
        make = _as_tuples(make)
    specs = (output_signature,) if single else tuple(output_signature)
    iterations = _Iterations(make, tuple(_numpy_dtype(spec) for spec in specs),
                             tuple(_done_value(spec) for spec in specs))
    types = [tf.int64, tf.bool, *(spec.dtype for spec in specs)]

    def step(token: tf.Tensor, _: tf.Tensor) -> tuple[tf.Tensor, tuple[tf.Tensor, ...]]:
        token, done, *values = tf.numpy_function(iterations.step, [token], types, stateful=True)
        return tf.ensure_shape(token, []), (
            tf.ensure_shape(done, []), *(tf.ensure_shape(value, spec.shape) for value, spec in zip(values, specs)))

    def going_on(done: tf.Tensor, *_: tf.Tensor) -> tf.Tensor:
        return tf.logical_not(done)

    def values_of(_: tf.Tensor, *values: tf.Tensor) -> tf.Tensor | tuple[tf.Tensor, ...]:
        return values[0] if single else tuple(values)

    # scan's state is the pass's token, kept per iterator: 0 until its first step begins the pass.
    steps = tf.data.Dataset.from_tensors(np.int64(0)).repeat().scan(np.int64(0), step)
    return steps.take_while(going_on).map(values_of)
