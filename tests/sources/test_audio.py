"""WAV files -> float samples + sample rate (or bytes passed through), read back equal."""

import struct
import wave

import numpy as np
import pytest
import tensorflow as tf

from beam_tfrecord import WriterChecks
from beam_tfrecord.errors import AudioDecodeError
from beam_tfrecord.sources.audio import ReadAudioFiles, audio_class_names, audio_schema, decode_wav


def _pcm16(path, samples: np.ndarray, rate: int) -> None:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(samples.shape[1])
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(samples.astype("<i2").tobytes())


def _float32_wav(samples: np.ndarray, rate: int) -> bytes:
    data = samples.astype("<f4").tobytes()
    channels = samples.shape[1]
    fmt = struct.pack("<HHIIHH", 3, channels, rate, rate * channels * 4, channels * 4, 32)
    return (b"RIFF" + struct.pack("<I", 4 + 8 + len(fmt) + 8 + len(data)) + b"WAVE" + b"fmt "
            + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data)) + data)


@pytest.fixture(scope="module")
def audio_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("audio")
    rng = np.random.default_rng(0)
    clips = {}
    for label, channels in (("speech", 1), ("music", 2)):
        (root / label).mkdir()
        for i in range(2):
            pcm = rng.integers(-32768, 32767, (100 + i, channels))
            _pcm16(root / label / f"{i}.wav", pcm, 16000)
            clips[f"{label}/{i}.wav"] = (pcm / 32768.0, 16000)
    floats = rng.uniform(-1, 1, (50, 1)).astype(np.float32)
    (root / "music" / "float.wav").write_bytes(_float32_wav(floats, 44100))
    clips["music/float.wav"] = (floats, 44100)
    return root, clips


def test_wav_decodes_like_tensorflow(audio_root):
    root, _ = audio_root
    data = (root / "music" / "0.wav").read_bytes()
    ours = decode_wav(data)
    theirs = tf.audio.decode_wav(data)
    np.testing.assert_array_equal(ours.samples, theirs.audio.numpy())
    assert ours.sample_rate == int(theirs.sample_rate)


def test_decoded_audio_round_trip(audio_root, tmp_path, write, parse):
    root, clips = audio_root
    schema = audio_schema(class_names=audio_class_names(str(root)))
    manifest = write(ReadAudioFiles(str(root), labels_from_folders=True), schema, str(tmp_path / "out"))
    assert (manifest.num_inputs, manifest.num_rejected) == (5, 0)
    parsed = parse(str(tmp_path / "out"), {"audio": tf.io.RaggedFeature(tf.float32),
                                           "sample_rate": tf.io.FixedLenFeature([], tf.int64),
                                           "num_channels": tf.io.FixedLenFeature([], tf.int64),
                                           "label": tf.io.FixedLenFeature([], tf.int64)})
    back = sorted((len(a), int(r), int(c), int(label), np.float32(a).tobytes()) for a, r, c, label in
                  zip(parsed["audio"], parsed["sample_rate"], parsed["num_channels"], parsed["label"]))
    names = ("music", "speech")
    want = sorted((samples.size, rate, samples.shape[1], names.index(key.split("/")[0]),
                   np.float32(samples).reshape(-1).tobytes()) for key, (samples, rate) in clips.items())
    assert back == want


def test_audio_bytes_pass_through(audio_root, tmp_path, write, parse):
    root, clips = audio_root
    write(ReadAudioFiles(str(root), decode=False), audio_schema(decode=False), str(tmp_path / "out"))
    parsed = parse(str(tmp_path / "out"), {"audio": tf.io.FixedLenFeature([], tf.string)})
    assert sorted(parsed["audio"].tolist()) == sorted((root / key).read_bytes() for key in clips)


@pytest.mark.parametrize("data, message", [
    pytest.param(b"", "not a WAV file: 0 bytes starting b'', expected 'RIFF....WAVE'", id="zero-byte"),
    pytest.param(b"ID3\x03 not a wav file", "not a WAV file: 19 bytes starting b'ID3\\x03 not a w', expected "
                 "'RIFF....WAVE'", id="mp3-named-wav"),
    pytest.param(_float32_wav(np.zeros((10, 1)), 8000)[:-8],
                 "truncated 'data' chunk: header says 40 bytes, file has 32", id="truncated"),
])
def test_bad_wav_reasons(data, message):
    with pytest.raises(AudioDecodeError) as info:
        decode_wav(data)
    assert str(info.value) == message


def test_bad_wav_is_a_decode_dead_letter(tmp_path, write):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "good.wav").write_bytes(_float32_wav(np.zeros((4, 1)), 8000))
    (tmp_path / "in" / "bad.wav").write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunk")
    manifest = write(ReadAudioFiles(str(tmp_path / "in")), audio_schema(), str(tmp_path / "out"),
                     checks=WriterChecks(max_rejected_fraction=0.5))
    assert (manifest.num_inputs, manifest.num_rejected) == (2, 1)
    letter = (tmp_path / "out" / manifest.dead_letters).read_text()
    assert letter == ('{"error_type": "AudioDecodeError", "feature": "audio", "key": "bad.wav", "message": '
                      '"feature \'audio\': no \'fmt \' chunk in sample \'bad.wav\'", "stage": "decode"}\n')
