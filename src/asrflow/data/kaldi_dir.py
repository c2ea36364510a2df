"""Reading a Kaldi data directory's tables, every line accounted for, for
:func:`asrflow.data.importers.import_kaldi`.

Lhotse's loader (:func:`lhotse.kaldi.load_kaldi_data_dir`) keeps the last of two ``wav.scp``
lines with one recording ID (the cut then trains on another file's audio), drops segments of
unknown recordings and transcripts of unknown utterances without a word, and fails with an
``AssertionError`` or ``KeyError`` when ``utt2spk`` or ``text`` lacks a line. So the tables are
checked here the way Kaldi's ``utils/validate_data_dir.sh`` does: each line names a recording,
utterance or speaker the directory has, each ID once, and every utterance has its ``text`` (and
``utt2spk``, when there is one) line. Each other line is a problem naming the table, the line and
what to do.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from asrflow.data.manifest_text import _problem, read_text_lines

TABLES = (
    "wav.scp",
    "text",
    "segments",
    "utt2spk",
    "spk2utt",
    "spk2gender",
    "utt2gender",
    "utt2dur",
    "reco2dur",
    "utt2lang",
)
"""The text tables of a Kaldi data directory that asrflow reads (and checks)."""

UTTERANCE_TABLES = ("utt2gender", "utt2dur", "utt2lang")
"""Tables keyed by utterance whose values asrflow does not use: their keys are checked."""

HINT = (
    "Each line of a table must name a recording (wav.scp), utterance (segments, or wav.scp "
    "without segments) or speaker (utt2spk) of the data dir, each once; every utterance needs a "
    "text line (and a utt2spk line when utt2spk exists). Kaldi's utils/validate_data_dir.sh "
    "lists such lines; utils/fix_data_dir.sh drops them (check what it dropped)."
)


@dataclass(frozen=True)
class Line:
    """One line of a table: ``key`` (its first field) and ``value`` (the rest, stripped)."""

    lineno: int
    key: str
    value: str


At = Callable[[str, Line], str]
"""``at(table, line)``: ``"<data dir>/<table>:<line number>"``, where a problem is."""


@dataclass(frozen=True)
class Segment:
    """A ``segments`` line: ``end`` is ``None`` for ``-1`` (the end of the recording)."""

    recording: str
    start: float
    end: float | None


@dataclass
class KaldiDir:
    """The checked tables: ``utterances`` (ID -> its line in ``segments``, else ``wav.scp``)."""

    path: Path
    audio: dict[str, str]
    wav_lines: dict[str, Line]
    segments: dict[str, Segment] | None
    utterances: dict[str, Line]
    text: dict[str, Line]
    speakers: dict[str, str]

    def recording(self, utt: str) -> str:
        return self.segments[utt].recording if self.segments is not None else utt


def read_tables(data_dir: Path, problems: list[str]) -> dict[str, list[tuple[int, str]]]:
    """The lines of every table present (see :func:`read_text_lines`), by file name."""
    return {
        name: read_text_lines(data_dir / name, problems)
        for name in TABLES
        if (data_dir / name).is_file()
    }


def check_tables(
    data_dir: Path, tables: dict[str, list[tuple[int, str]]], problems: list[str]
) -> KaldiDir:
    """Parse and cross-check ``tables``; every line that does not fit is added to ``problems``."""
    at = _locator(data_dir)
    wav = _table(data_dir, "wav.scp", tables["wav.scp"], problems, "recording")
    audio = _wav_scp_audio(wav, at, problems)
    segments: dict[str, Segment] | None = None
    if "segments" in tables:
        seg_lines = _table(data_dir, "segments", tables["segments"], problems, "segment")
        segments = _segments(seg_lines, wav, at, problems)
        utterances = seg_lines  # a malformed segment is named as such, not its text line too
        table_of_utterances = "segments"
    else:
        utterances = dict(wav)
        table_of_utterances = "wav.scp"
    if "text" not in tables:
        problems.append(
            _problem(
                str(data_dir / "text"),
                "does not exist: a Kaldi data dir needs the transcript of every utterance "
                "('<utterance-id> <transcript>' per line)",
            )
        )
    text = _table(data_dir, "text", tables.get("text", []), problems, "utterance")
    unknown = (
        "utterance {key} has no segment in segments: add its segment there, or remove this line"
        if segments is not None
        else "utterance {key} is not a recording in wav.scp (without a segments file, each "
        "utterance is a whole recording): add it to wav.scp, or remove this line"
    )
    _known(text, "text", utterances, unknown, at, problems)
    if "text" in tables:
        _cover(text, "text", "transcript", utterances, table_of_utterances, at, problems)
    utt2spk = _table(data_dir, "utt2spk", tables.get("utt2spk", []), problems, "utterance")
    for line in utt2spk.values():
        if not line.value:
            problems.append(_problem(at("utt2spk", line), "expected '<utterance-id> <speaker>'"))
    _known(utt2spk, "utt2spk", utterances, unknown, at, problems)
    if "utt2spk" in tables:
        _cover(utt2spk, "utt2spk", "speaker", utterances, table_of_utterances, at, problems)
    speakers = {u: line.value for u, line in utt2spk.items() if line.value}
    _check_speaker_tables(data_dir, tables, utt2spk, at, problems)
    for name in UTTERANCE_TABLES:
        lines = _table(data_dir, name, tables.get(name, []), problems, "utterance")
        _known(lines, name, utterances, unknown, at, problems)
    reco2dur = _table(data_dir, "reco2dur", tables.get("reco2dur", []), problems, "recording")
    _known(
        reco2dur,
        "reco2dur",
        wav,
        "recording {key} is not in wav.scp: add it there, or remove this line",
        at,
        problems,
    )
    return KaldiDir(data_dir, audio, wav, segments, utterances, text, speakers)


def _locator(data_dir: Path) -> At:
    def at(table: str, line: Line) -> str:
        return f"{data_dir / table}:{line.lineno}"

    return at


def _table(
    data_dir: Path, name: str, lines: list[tuple[int, str]], problems: list[str], kind: str
) -> dict[str, Line]:
    """Key -> line of a table, in file order; a key on a second line is a problem naming both
    lines (Lhotse would silently keep the last)."""
    out: dict[str, Line] = {}
    for lineno, raw in lines:
        parts = raw.split(maxsplit=1)
        if not parts:
            continue
        key = parts[0]
        first = out.get(key)
        if first is not None:
            problems.append(
                _problem(
                    f"{data_dir / name}:{lineno}",
                    f"{kind} {key} is listed twice in {name}, at lines {first.lineno} and "
                    f"{lineno}: keep the right line and remove the other",
                )
            )
            continue
        out[key] = Line(lineno, key, parts[1].strip() if len(parts) > 1 else "")
    return out


def _wav_scp_audio(wav: dict[str, Line], at: At, problems: list[str]) -> dict[str, str]:
    """Recording ID -> audio path of every wav.scp line that names a file; each line that does
    not (no path, a pipe command) is a problem."""
    audio: dict[str, str] = {}
    for rid, line in wav.items():
        if not line.value:
            problems.append(_problem(at("wav.scp", line), "expected '<recording-id> <path>'"))
        elif line.value.endswith("|"):
            problems.append(
                _problem(at("wav.scp", line), f"recording {rid} is a pipe command, not a file")
            )
        else:
            audio[rid] = line.value
    return audio


def _segments(
    lines: dict[str, Line], wav: dict[str, Line], at: At, problems: list[str]
) -> dict[str, Segment]:
    """The well-formed ``segments`` lines of known recordings; each other line is a problem."""
    out: dict[str, Segment] = {}
    for utt, line in lines.items():
        where = at("segments", line)
        fields = line.value.split()
        if len(fields) != 3:
            problems.append(
                _problem(where, "expected '<utterance-id> <recording-id> <start> <end>'")
            )
            continue
        rid, start_text, end_text = fields
        try:
            start, end = float(start_text), float(end_text)
        except ValueError:
            problems.append(_problem(where, "start and end must be numbers (seconds)"))
            continue
        if rid not in wav:
            problems.append(
                _problem(
                    where,
                    f"segment {utt} names recording {rid}, which wav.scp does not list: add "
                    "the recording to wav.scp or remove the segment",
                )
            )
        elif start < 0:
            problems.append(_problem(where, f"start must not be negative (got {start_text})"))
        elif end != -1 and end <= start:
            problems.append(
                _problem(
                    where,
                    f"end {end_text} is not after start {start_text} (an end of -1 means the "
                    "end of the recording)",
                )
            )
        else:
            out[utt] = Segment(rid, start, None if end == -1 else end)
    return out


def _cover(
    lines: dict[str, Line],
    name: str,
    what: str,
    utterances: dict[str, Line],
    utterance_table: str,
    at: At,
    problems: list[str],
) -> None:
    """Table ``name`` has a line (the utterance's ``what``) for every utterance."""
    kind = "segment" if utterance_table == "segments" else "recording"
    for utt, line in utterances.items():
        if utt not in lines:
            problems.append(
                _problem(
                    at(utterance_table, line),
                    f"{kind} {utt} has no line in {name}: add its {what} to {name}, or remove "
                    "this line",
                )
            )


def _known(
    lines: dict[str, Line],
    name: str,
    known: Collection[str],
    unknown: str,
    at: At,
    problems: list[str],
) -> None:
    """Every key of table ``name`` is in ``known``, else ``unknown`` (a message with ``{key}``)
    at its line."""
    for key, line in lines.items():
        if key not in known:
            problems.append(_problem(at(name, line), unknown.format(key=key)))


def _check_speaker_tables(
    data_dir: Path,
    tables: dict[str, list[tuple[int, str]]],
    utt2spk: dict[str, Line],
    at: At,
    problems: list[str],
) -> None:
    """``spk2utt`` is ``utt2spk`` inverted, and ``spk2gender`` names only its speakers."""
    by_speaker: dict[str, set[str]] = defaultdict(set)
    for utt, line in utt2spk.items():
        if line.value:
            by_speaker[line.value].add(utt)
    if "spk2utt" in tables:
        spk2utt = _table(data_dir, "spk2utt", tables["spk2utt"], problems, "speaker")
        if "utt2spk" not in tables and spk2utt:
            problems.append(
                _problem(
                    str(data_dir / "spk2utt"),
                    "exists without utt2spk (asrflow reads speakers from utt2spk): write it "
                    "with utils/spk2utt_to_utt2spk.pl spk2utt > utt2spk, or remove spk2utt",
                )
            )
        else:
            _check_spk2utt(spk2utt, by_speaker, utt2spk, at, problems)
    spk2gender = _table(data_dir, "spk2gender", tables.get("spk2gender", []), problems, "speaker")
    _known(
        spk2gender,
        "spk2gender",
        by_speaker,
        "speaker {key} is in no line of utt2spk: remove this line, or give the speaker's "
        "utterances in utt2spk",
        at,
        problems,
    )


def _check_spk2utt(
    spk2utt: dict[str, Line],
    by_speaker: dict[str, set[str]],
    utt2spk: dict[str, Line],
    at: At,
    problems: list[str],
) -> None:
    regenerate = "regenerate it with utils/utt2spk_to_spk2utt.pl utt2spk > spk2utt"
    for spk, line in spk2utt.items():
        listed, expected = set(line.value.split()), by_speaker.get(spk, set())
        if listed != expected:
            diff = []
            if listed - expected:
                diff.append(f"lists {' '.join(sorted(listed - expected))}, which utt2spk does not")
            if expected - listed:
                diff.append(f"lacks {' '.join(sorted(expected - listed))}")
            problems.append(
                _problem(
                    at("spk2utt", line),
                    f"speaker {spk} disagrees with utt2spk ({'; '.join(diff)}): {regenerate}",
                )
            )
    for spk in sorted(by_speaker.keys() - spk2utt.keys()):
        first = min(by_speaker[spk], key=lambda u: utt2spk[u].lineno)
        problems.append(
            _problem(
                at("utt2spk", utt2spk[first]),
                f"speaker {spk} has no line in spk2utt: {regenerate}",
            )
        )
