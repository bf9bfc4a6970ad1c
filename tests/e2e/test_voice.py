"""pocket voice (issue 17): scripted spoken conversations through Debian's WebRTC VAD,
pocketsphinx, flite and espeak-ng, on the virtual clock (deterministic, faster than real time).
The real-time acceptance run with the pocket-0.3b package is scripts/voice-bench.sh."""
import json
import sys
import os
import unittest
import wave

import numpy as np

from harness import (POCKET, SOURCE_DIR, STORIES, STORIES_TOK, main_unittest, pocket, run,
                     work_path)

SANITIZED = os.environ.get("POCKET_SANITIZED") == "1"
ACCEPTANCE = os.path.join(SOURCE_DIR, "tests", "voice", "acceptance.script")
SMOKE = os.path.join(SOURCE_DIR, "tests", "voice", "smoke.script")


def voice(script, *extra, timeout=1200):
    p = pocket("voice", "-m", STORIES, "--tokenizer", STORIES_TOK, "--script", script,
               "--virtual-clock", "-t", "2", "--json", *extra, timeout=timeout)
    return json.loads(p.stdout)


def write_wav(path, samples, rate, width=2):
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(width)
        w.setframerate(rate)
        if width == 2:
            w.writeframes(np.asarray(samples, dtype="<i2").tobytes())
        else:
            w.writeframes(np.asarray(samples, dtype=np.uint8).tobytes())


def read_wav(path):
    with wave.open(path, "rb") as w:
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2"), w.getframerate()


class VoiceTest(unittest.TestCase):
    def test_scripted_conversation_is_deterministic(self):
        """The acceptance script (20 turns, 5 barge-ins) twice on the virtual clock: the same
        trace, faster than real time, every barge-in taken, the recognizer's WER within 10%, the
        samples reconciled, readable replies from stories260K. Sanitized builds: the smoke
        script."""
        script = SMOKE if SANITIZED else ACCEPTANCE
        out = work_path("voice-played.wav")
        a = voice(script, "-o", out)
        b = voice(script)
        self.assertEqual(a["trace"], b["trace"], "the virtual clock run is not deterministic")
        n_turns = 3 if SANITIZED else 20
        n_barge = 1 if SANITIZED else 5
        self.assertEqual(a["turns"], n_turns, a["heard"])
        self.assertEqual(a["scripted_barge_ins"], n_barge)
        self.assertEqual(a["barge_ins"], n_barge)
        self.assertLess(a["wall_s"], a["conversation_s"], "slower than real time")
        self.assertLessEqual(a["asr_wer"], 0.10, a["heard"])
        self.assertTrue(a["samples_reconcile"])
        self.assertEqual(a["samples_played"] + a["samples_dropped"], a["samples_synthesized"])
        self.assertGreater(a["samples_dropped"], 0)
        # Barge-in: playback stops within the endpointer's start window (100 ms).
        self.assertLessEqual(a["barge_in_ms_p50"], 150)
        # The WAV is the conversation's timeline at 16 kHz, holding exactly what was played.
        played, rate = read_wav(out)
        self.assertEqual(rate, 16000)
        self.assertAlmostEqual(len(played) / rate, a["conversation_s"], delta=0.02)
        self.assertGreaterEqual(len(played), a["samples_played"])
        events = [e["event"] for e in a["trace"]]
        for name in ("speech_start", "speech_end", "asr_partial", "asr_final", "first_token",
                     "segment", "first_audio", "barge_in", "reply_end"):
            self.assertIn(name, events)
        times = [e["t_ms"] for e in a["trace"]]
        self.assertEqual(times, sorted(times), "the trace is not in time order")
        # stories260K writes English: most of each reply's words are real words.
        words = " ".join(a["replies"]).split()
        self.assertGreater(len(words), 30)
        common = {"the", "a", "was", "he", "she", "to", "and", "it", "day", "one", "said", "with",
                  "her", "his", "they", "play", "big", "little", "saw", "time", "upon", "once"}
        self.assertGreater(sum(w.strip('.,!?"').lower() in common for w in words) / len(words),
                           0.2, a["replies"])
        # A reply interrupted keeps only what was played: less than the text its turn generated.
        generated = {}
        for e in a["trace"]:
            if e["event"] == "segment":
                generated[e["turn"]] = generated.get(e["turn"], "") + e["text"]
        interrupted = 0
        for i, e in enumerate(a["trace"]):
            if e["event"] == "barge_in":
                self.assertGreater(e["dropped"], 0)
                end = next(x for x in a["trace"][i:] if x["event"] == "reply_end")
                self.assertLess(len(end["played"].replace(" ", "")),
                                len(generated.get(end["turn"], "").replace(" ", "")))
                interrupted += 1
        self.assertEqual(interrupted, n_barge)

    def test_greedy_replies_are_what_pocket_run_generates(self):
        """Each turn's reply runs through the runtime's scheduler on the voice worker: greedy, it
        is the text `pocket run` generates alone from the prompt the turn built (stories260K has
        no chat template: the words heard and ".\\n"); an interrupted turn, a prefix of it."""
        a = voice(SMOKE, "--temp", "0")
        generated, interrupted = {}, set()
        for i, e in enumerate(a["trace"]):
            if e["event"] == "segment":
                generated[e["turn"]] = generated.get(e["turn"], "") + " " + e["text"]
            if e["event"] == "barge_in":
                interrupted.add(next(x for x in a["trace"][i:] if x["event"] == "reply_end")["turn"])
        self.assertEqual(len(a["heard"]), 3)
        self.assertEqual(len(interrupted), 1)
        for turn, heard in enumerate(a["heard"]):
            alone = pocket("run", "-m", STORIES, "--tokenizer", STORIES_TOK, "-t", "2", "-p",
                           heard + ".\n", "-n", "48", "--temp", "0").stdout
            want, got = " ".join(alone.split()), " ".join(generated[turn].split())
            self.assertGreater(len(got), 0, turn)
            if turn in interrupted:
                self.assertTrue(want.startswith(got), (turn, got, want))
            else:
                self.assertEqual(got, want, turn)
        # Each turn's prompt was evaluated early, in the endpointer's silence, from the partial
        # hypothesis; at the endpoint the turn evaluated only what the final text changed. Off,
        # the turns evaluate everything, and say the same.
        off = voice(SMOKE, "--temp", "0", "--early-prefill-ms", "0")
        self.assertEqual(a["early_prefills"], 3)
        self.assertEqual(off["early_prefills"], 0)
        self.assertLess(a["turn_prompt_tokens"], off["turn_prompt_tokens"])
        said = lambda r: [(e["turn"], e["text"]) for e in r["trace"] if e["event"] == "segment"]
        self.assertEqual(said(a), said(off))

    @unittest.skipIf(SANITIZED, "ten minutes of audio: the release build's test")
    def test_ten_minute_conversation_keeps_its_memory(self):
        """100 turns (the acceptance script five times: over 10 minutes of conversation) with
        a random-weight Qwen3-tokenizer model, whose chat history grows until it is trimmed to the
        context: resident memory at the end within 8 MiB of that after the second turn."""
        from harness import QWEN3_TOKENIZER, make_model, require
        require(QWEN3_TOKENIZER, "run scripts/fetch_fixtures.sh")
        model = make_model("serve-qwen3-tiny.gguf", extra=("--tokenizer", QWEN3_TOKENIZER))
        with open(ACCEPTANCE) as f:
            lines = [l for l in f.read().splitlines() if l.startswith(("after", "barge"))]
        path = work_path("voice-long.script")
        with open(path, "w") as f:
            f.write("noise -60\nat 0.5: good morning how are you today\n")
            for i in range(99):
                f.write(lines[i % len(lines)] + "\n")
        p = pocket("voice", "-m", model, "--script", path, "--virtual-clock", "-t", "2", "-c",
                   "1024", "--json", timeout=1800)
        r = json.loads(p.stdout)
        self.assertGreaterEqual(r["conversation_s"], 600)
        self.assertGreaterEqual(r["turns"], 90)
        print(f"rss {r['rss_warm_mib']:.1f} -> {r['rss_end_mib']:.1f} MiB over {r['conversation_s']:.0f} s", file=sys.stderr)
        self.assertTrue(r["samples_reconcile"])
        self.assertGreater(r["rss_warm_mib"], 0)
        self.assertLess(r["rss_end_mib"] - r["rss_warm_mib"], 8.0,
                        (r["rss_warm_mib"], r["rss_end_mib"]))

    def test_robustness(self):
        """Silence only, noise only, clipped speech, another rate, a file that is not audio."""
        folder = work_path("voice-robust")
        os.makedirs(folder, exist_ok=True)
        fixtures = os.path.join(folder, "fixtures")
        with open(os.path.join(folder, "one.script"), "w") as f:
            f.write("noise off\nat 0.2: please set a timer for ten minutes\n")
        voice(os.path.join(folder, "one.script"), "--fixtures", fixtures)
        speech, rate = read_wav(os.path.join(fixtures, "turn-01.wav"))
        self.assertEqual(rate, 16000)
        rng = np.random.default_rng(3)
        write_wav(os.path.join(folder, "silence.wav"), np.zeros(16000 * 3), 16000)
        write_wav(os.path.join(folder, "noise.wav"),
                  rng.normal(0, 32768 * 10 ** (-50 / 20), 16000 * 3), 16000)
        write_wav(os.path.join(folder, "clipped.wav"),
                  np.clip(speech.astype(np.int64) * 4, -32768, 32767), 16000)
        # The same speech at 44.1 kHz (band-limited: zero-padded spectrum; pocket resamples it
        # on reading) and as 8-bit PCM.
        n_out = int(len(speech) * 44100 / 16000)
        spectrum = np.fft.rfft(speech.astype(np.float64))
        padded = np.zeros(n_out // 2 + 1, dtype=complex)
        padded[:len(spectrum)] = spectrum
        up = np.fft.irfft(padded, n_out) * (n_out / len(speech))
        write_wav(os.path.join(folder, "rate44k.wav"), np.clip(np.round(up), -32768, 32767), 44100)
        write_wav(os.path.join(folder, "pcm8.wav"),
                  (speech.astype(np.int64) // 256 + 128).clip(0, 255), 16000, width=1)
        with open(os.path.join(folder, "text.wav"), "w") as f:
            f.write("not audio at all\n")

        def one(name, file, text="please set a timer for ten minutes"):
            path = os.path.join(folder, f"{name}.script")
            with open(path, "w") as f:
                f.write(f"at 0.2: [{file}] {text}\n")
            return path

        quiet = voice(one("silence", "silence.wav"))
        self.assertEqual(quiet["turns"], 0)
        self.assertEqual(quiet["samples_synthesized"], 0)
        noisy = voice(one("noise", "noise.wav"))
        self.assertEqual(noisy["turns"], 0, noisy["heard"])
        for name in ("clipped", "rate44k", "pcm8"):
            r = voice(one(name, f"{name}.wav"))
            self.assertEqual(r["turns"], 1, (name, r["heard"]))
            self.assertLessEqual(r["asr_wer"], 0.35, (name, r["heard"]))
            self.assertTrue(r["samples_reconcile"])
        bad = pocket("voice", "-m", STORIES, "--tokenizer", STORIES_TOK, "--script",
                     one("text", "text.wav"), "--virtual-clock", check=False)
        self.assertEqual(bad.returncode, 1)
        self.assertIn("text.wav", bad.stderr)
        # Script errors name the file and line.
        with open(os.path.join(folder, "broken.script"), "w") as f:
            f.write("noise -60\nwhen 1: hello\n")
        bad = pocket("voice", "-m", STORIES, "--tokenizer", STORIES_TOK, "--script",
                     os.path.join(folder, "broken.script"), "--virtual-clock", check=False)
        self.assertEqual(bad.returncode, 1)
        self.assertIn("broken.script:2", bad.stderr)

    def test_summary_without_barge_in_and_a_missing_recording(self):
        """Issue 44: a conversation without a barge-in printed "barge-in: P50 0 ms (0)" (0 in
        --json), as if one had been measured at 0 ms: "-" and null; a turn naming a WAV that is
        not there was an error without the script's line."""
        folder = work_path("voice-summary")
        os.makedirs(folder, exist_ok=True)
        script = os.path.join(folder, "one.script")
        with open(script, "w") as f:
            f.write("noise off\nat 0.2: please set a timer for ten minutes\n")
        p = pocket("voice", "-m", STORIES, "--tokenizer", STORIES_TOK, "--script", script,
                   "--virtual-clock", "-t", "2")
        summary = p.stdout.splitlines()[-1]
        print(summary)
        self.assertIn("(1 replies); barge-in: -;", summary)
        self.assertRegex(summary, r"^first audio: P50 \d+ ms, P90 \d+ ms \(1 replies\)")
        r = voice(script)
        self.assertEqual(r["barge_ins"], 0)
        self.assertIsNone(r["barge_in_ms_p50"])
        self.assertGreater(r["first_audio_ms_p50"], 0)
        with open(script, "w") as f:
            f.write("noise off\nat 0.2: hello there\n\nafter 0.5: [nowhere.wav] what is it\n")
        bad = pocket("voice", "-m", STORIES, "--tokenizer", STORIES_TOK, "--script", script,
                     "--virtual-clock", check=False)
        self.assertEqual(bad.returncode, 1, bad.stderr)
        self.assertIn(f"{script}:4", bad.stderr)
        self.assertIn("nowhere.wav", bad.stderr)

    def test_live_from_a_recording_and_through_alsa(self):
        """A live conversation (no script): a recording as the microphone, the reply to a WAV
        file; then the same audio through ALSA (capture from alsa-lib's file plugin reading it,
        playback to the file plugin writing raw PCM; no sound card needed): the same trace and
        the same samples. A device that does not exist is an error naming it."""
        folder = work_path("voice-live")
        os.makedirs(folder, exist_ok=True)
        fixtures = os.path.join(folder, "fixtures")
        with open(os.path.join(folder, "one.script"), "w") as f:
            f.write("noise -60\nat 0.3: what is the weather like tomorrow\n")
        voice(os.path.join(folder, "one.script"), "--fixtures", fixtures)
        speech, _ = read_wav(os.path.join(fixtures, "turn-01.wav"))
        rate = 24000
        out = os.path.join(folder, "reply.wav")
        live = json.loads(pocket(
            "voice", "-m", STORIES, "--tokenizer", STORIES_TOK, "--input",
            os.path.join(fixtures, "turn-01.wav"), "-o", out, "--virtual-clock", "-t", "2",
            "--sink-rate", str(rate), "--json").stdout)
        self.assertEqual(live["turns"], 1, live["heard"])
        self.assertEqual(live["heard"], ["what is the weather like tomorrow"])
        self.assertFalse(live["stopped"])
        self.assertGreater(live["samples_synthesized"], rate // 2)
        self.assertEqual(live["samples_played"], live["samples_synthesized"])
        played, got_rate = read_wav(out)
        self.assertEqual(got_rate, rate)
        self.assertEqual(len(played), round(live["conversation_s"] * 100) * rate // 100)
        self.assertGreater(int(np.abs(played).max()), 1000, "the reply is silent")
        events = [e["event"] for e in live["trace"]]
        for name in ("speech_start", "speech_end", "asr_final", "first_token", "first_audio",
                     "reply_end"):
            self.assertIn(name, events)

        # ALSA: an .asoundrc (alsa-lib reads $HOME/.asoundrc) naming a microphone that replays
        # the same samples, silence after them for as long as the conversation lasted.
        mic = os.path.join(folder, "mic.raw")
        pad = np.zeros(round(live["conversation_s"] * 16000) + 16000, dtype="<i2")
        pad[:len(speech)] = speech
        pad.tofile(mic)
        with open(os.path.join(folder, ".asoundrc"), "w") as f:
            f.write('pcm.pocket_mic {\n  type file\n  slave.pcm null\n  file "/dev/null"\n'
                    f'  infile "{mic}"\n  format raw\n}}\n')
        speaker = os.path.join(folder, "speaker.raw")
        env = dict(os.environ, HOME=folder)
        p = run([POCKET, "voice", "-m", STORIES, "--tokenizer",
                 STORIES_TOK, "--capture-device", "pocket_mic", "--playback-device",
                 f"file:'{speaker}',raw", "--duration", str(live["conversation_s"]),
                 "--virtual-clock", "-t", "2", "--sink-rate", str(rate), "--json"],
                check=False, env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        alsa = json.loads(p.stdout)
        self.assertTrue(alsa["stopped"])
        self.assertEqual(alsa["conversation_s"], live["conversation_s"])
        self.assertEqual(alsa["trace"], live["trace"])
        self.assertEqual(alsa["overruns"], 0)
        self.assertEqual(alsa["underruns"], 0)
        self.assertTrue(np.array_equal(np.fromfile(speaker, dtype="<i2"), played),
                        "ALSA played other samples than the recording")

        for flag in ("--capture-device", "--playback-device"):
            args = ["--input", os.path.join(fixtures, "turn-01.wav")] if flag[2] == "p" else []
            p = run([POCKET, "voice", "-m", STORIES, "--tokenizer",
                     STORIES_TOK, *args, flag, "no_such_pcm", "--virtual-clock"], check=False,
                    env=env)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("ALSA device 'no_such_pcm'", p.stderr)
        bad = pocket("voice", "-m", STORIES, "--tokenizer", STORIES_TOK, "--virtual-clock",
                     check=False)
        self.assertEqual(bad.returncode, 2)
        self.assertIn("--script", bad.stderr)


if __name__ == "__main__":
    main_unittest()
