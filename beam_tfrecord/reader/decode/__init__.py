"""Serialized ``tf.train.Example`` records into NumPy, without TensorFlow: ``numpy_decode`` one record at
a time, ``block_decode`` a block of records into columns. Used by ``read_numpy``, ``TFRecordIterableDataset``
and the mixtures of ``order.mixing``; tf.data parses with TensorFlow's own ops (``tf_spec``).
"""
