"""`haki import`'s position when batches commit out of order (service/memory/importer.py): what
the progress file records, and which lines a resumed import reads. No database: the batches and
the file are the importer's own."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import msgspec

from service.memory import importer
from service.memory.importer import ImportOptions, ImportProgress, _Batch, _batches, _record


def lines_file(tmp_path: Path, n: int) -> Path:
    path = tmp_path / "facts.jsonl"
    path.write_text("".join(json.dumps({"content": f"line {i + 1}"}) + "\n" for i in range(n)))
    return path


def read(opts: ImportOptions, progress: ImportProgress) -> list[list[int]]:
    """The line numbers of each batch a resumed import would read."""
    batches = _batches(opts, progress.offset, progress.line, progress.committed_ahead)
    return [[line for line, _ in b.items] for b in batches]


def test_batches_that_commit_out_of_order_are_spans_until_the_gap_closes(tmp_path: Path) -> None:
    opts = ImportOptions(path=lines_file(tmp_path, 10), project_id="p", subject_id="s", batch_size=3)
    progress = ImportProgress(kind="facts", project_id="p", subject_id="s")
    batches: list[_Batch] = list(_batches(opts, 0, 0))
    assert [[line for line, _ in b.items] for b in batches] == [[1, 2, 3], [4, 5, 6], [7, 8, 9], [10]]

    _record(opts, progress, batches[1], 3)  # the second batch commits first
    _record(opts, progress, batches[2], 3)
    assert (progress.line, progress.written) == (0, 6)
    assert [(s.start_line, s.end_line) for s in progress.committed_ahead] == [(3, 6), (6, 9)]
    saved = msgspec.json.decode(importer.progress_path(opts.path).read_bytes(), type=ImportProgress)
    assert saved.committed_ahead == progress.committed_ahead and saved.version == importer.PROGRESS_VERSION

    # Resumed now, the import reads the first batch and the last line only: the two spans that
    # follow one another are skipped together.
    assert read(opts, progress) == [[1, 2, 3], [10]]

    _record(opts, progress, batches[0], 3)  # the gap closes: the position moves past both spans
    assert (progress.line, progress.committed_ahead, progress.written) == (9, [], 9)
    assert read(opts, progress) == [[10]]


def test_a_span_after_a_gap_is_skipped_and_the_gap_read(tmp_path: Path) -> None:
    opts = ImportOptions(path=lines_file(tmp_path, 8), project_id="p", subject_id="s", batch_size=2)
    batches = list(_batches(opts, 0, 0))
    progress = ImportProgress(kind="facts", project_id="p", subject_id="s")
    _record(opts, progress, batches[0], 2)
    _record(opts, progress, batches[2], 2)
    assert progress.line == 2 and progress.committed_ahead == [batches[2].span()]
    assert read(opts, progress) == [[3, 4], [7, 8]]


def test_a_batch_of_rejected_lines_only_moves_the_position_too(tmp_path: Path) -> None:
    path = tmp_path / "mixed.jsonl"
    path.write_text('{not json\n\n{"content": "kept"}\n')
    opts = ImportOptions(path=path, project_id="p", subject_id="s", batch_size=1)
    batches = list(_batches(opts, 0, 0))
    assert [(b.start_line, b.end_line, len(b.items), len(b.rejects)) for b in batches] == [(0, 3, 1, 1)]
    progress = ImportProgress(kind="facts", project_id="p", subject_id="s")
    _record(opts, progress, batches[0], 1)
    assert (progress.line, progress.rejected_count, progress.committed_ahead) == (3, 1, [])


def test_a_version_1_progress_file_resumes_without_spans(tmp_path: Path) -> None:
    saved = {"kind": "facts", "project_id": "p", "subject_id": "s", "offset": 0, "line": 0, "version": 1}
    progress = msgspec.json.decode(json.dumps(saved).encode(), type=ImportProgress)
    assert (progress.version, progress.committed_ahead) == (1, [])


def test_batch_keys_follow_the_run_and_the_lines(tmp_path: Path) -> None:
    opts = ImportOptions(path=lines_file(tmp_path, 4), project_id="p", subject_id="s")
    run, other_run = uuid.uuid4(), uuid.uuid4()
    key = importer.batch_key(opts, run, [1, 2])
    # The same run resumed asks with the same key; another run (--restart) or lines, another key.
    assert importer.batch_key(opts, run, [1, 2]) == key
    assert len({key, importer.batch_key(opts, other_run, [1, 2]), importer.batch_key(opts, run, [1])}) == 3
    # A progress file before version 3 (no run_id) keeps the keys its import began with.
    legacy = uuid.uuid5(uuid.NAMESPACE_URL, f"{opts.path.resolve()}|p|s|[1, 2]")
    assert importer.batch_key(opts, None, [1, 2]) == str(legacy)
