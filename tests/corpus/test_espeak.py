import numpy as np
import pytest

from asrflow.corpus.espeak import EspeakError, native_sample_rate, resample, synthesize


def test_synthesize_gives_audible_int16_at_native_rate():
    assert native_sample_rate() == 22050
    samples = synthesize("hello maria this is a small test", "en+m3", rate=170, pitch=50)
    assert samples.dtype == np.int16
    assert 0.5 < len(samples) / 22050 < 5.0
    assert np.abs(samples).max() > 3000
    assert np.sqrt(np.mean(samples.astype(np.float64) ** 2)) > 300


@pytest.mark.parametrize("voice", ["en+f2", "en+m7", "es+m3"])
def test_synthesize_is_deterministic_whatever_came_before(voice):
    text = "muchas gracias por favor" if voice.startswith("es") else "the old man found a key"
    first = synthesize(text, voice, rate=160, pitch=40, pitch_range=60, seed=7)
    synthesize("something else entirely, spoken in between", "en+m1", rate=200, pitch=70, seed=3)
    again = synthesize(text, voice, rate=160, pitch=40, pitch_range=60, seed=7)
    assert first.tobytes() == again.tobytes()


def test_voice_rate_and_pitch_change_the_audio():
    base = synthesize("where is the red ball", "en+m3", rate=170, pitch=50)
    slower = synthesize("where is the red ball", "en+m3", rate=130, pitch=50)
    other = synthesize("where is the red ball", "en+f1", rate=170, pitch=50)
    assert len(slower) > len(base) * 1.15
    assert base.tobytes() != other.tobytes()


def test_resample_to_16k():
    samples = synthesize("five green bottles", "en+m2")
    audio = resample(samples, native_sample_rate(), 16000)
    assert audio.dtype == np.float64
    assert abs(len(audio) - len(samples) * 16000 / 22050) <= 1
    assert np.abs(audio).max() > 3000
    assert resample(samples, 22050, 22050).tobytes() == samples.astype(np.float64).tobytes()


def test_errors():
    with pytest.raises(EspeakError, match="unknown eSpeak voice"):
        synthesize("hello", "xx-not-a-voice")
    with pytest.raises(ValueError, match="rate"):
        synthesize("hello", "en", rate=10)
    with pytest.raises(ValueError, match="pitch"):
        synthesize("hello", "en", pitch=101)
    # the engine still works after an error
    assert len(synthesize("hello", "en")) > 0


def test_falls_back_to_the_shared_library_without_a_private_copy(monkeypatch, caplog):
    from asrflow.corpus import espeak

    def no_temp_dir(*args, **kwargs):
        raise OSError("read-only file system")

    expected = synthesize("the little girl", "en+f3", seed=2)
    monkeypatch.setattr(espeak, "_library", None)
    monkeypatch.setattr(espeak.tempfile, "mkdtemp", no_temp_dir)
    first = synthesize("the little girl", "en+f3", seed=2)
    assert "no private library copy" in caplog.text
    synthesize("something in between", "en+m5", seed=9)
    assert synthesize("the little girl", "en+f3", seed=2).tobytes() == first.tobytes()
    assert first.tobytes() == expected.tobytes()
