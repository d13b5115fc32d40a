"""The tailer on real files: growth, rotation by rename and copytruncate, restarts, partial lines."""

from __future__ import annotations

import os

from exporter.config import LogSource
from exporter.logs.stages import UNDECIDED_STAGE
from exporter.logs.tailer import LogTailer
from exporter.simulate.logs import API, APP_READY, log_line, stats_message

OOM = log_line("EngineCore_DP0 pid=2", "ERROR", "core.py:1", "torch.OutOfMemoryError: CUDA out of memory. Tried")
STATS = log_line(API, "INFO", "loggers.py:1", stats_message(1, 0, 0.05, None, 1.0, 1.0))
START = log_line(API, "INFO", "api_server.py:1", "vLLM API server version 0.27.1", "08-16 12:00:00")
READY = APP_READY


def append(path, *lines):
    with open(path, "a", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))


def tailer(tmp_path, path, fmt="auto"):
    return LogTailer("s", LogSource(str(path), fmt), str(tmp_path / "state"))


def ooms(t):
    return t.analyzer.counts["oom"]


def test_follows_growth_and_waits_for_complete_lines(tmp_path):
    p = tmp_path / "v.log"
    append(p, START, READY)
    t = tailer(tmp_path, p)
    assert t.poll() == 2
    with open(p, "a") as f:
        f.write(OOM[:30])  # half a line: not analysed yet
    assert t.poll() == 0 and ooms(t) == 0
    with open(p, "a") as f:
        f.write(OOM[30:] + "\n")
    assert t.poll() == 1 and ooms(t) == 1


def test_missing_file_then_created(tmp_path):
    p = tmp_path / "later.log"
    t = tailer(tmp_path, p)
    assert t.poll() == 0 and not t.health.file_present
    append(p, START, OOM)
    assert t.poll() == 2 and ooms(t) == 1 and t.health.file_present


def test_rename_rotation_drains_the_old_file_first(tmp_path):
    p = tmp_path / "v.log"
    append(p, START, READY, STATS)
    t = tailer(tmp_path, p)
    t.poll()
    append(p, OOM)  # written just before the rotation, not yet read
    os.rename(p, str(p) + ".1")
    append(p, START, READY, STATS, OOM)
    t.poll()
    assert ooms(t) == 2 and t.health.rotations == 1


def test_copytruncate_rereads_from_the_start(tmp_path):
    p = tmp_path / "v.log"
    append(p, START, READY, STATS, STATS, STATS, STATS)
    t = tailer(tmp_path, p)
    t.poll()
    with open(p, "w"):
        pass  # truncated in place
    append(p, START, OOM)
    t.poll()
    assert ooms(t) == 1 and t.health.truncations == 1


def test_truncated_and_regrown_past_the_offset_is_noticed(tmp_path):
    p = tmp_path / "v.log"
    append(p, START, READY)
    t = tailer(tmp_path, p)
    t.poll()
    with open(p, "w") as f:  # truncated and rewritten between two polls, longer than before
        f.write(
            log_line("APIServer pid=9", "INFO", "api_server.py:1", "vLLM API server version 0.28.0", "09-01 00:00:00")
            + "\n"
        )
        f.write(OOM + "\n")
    t.poll()
    assert ooms(t) == 1 and t.health.truncations == 1


def test_restart_resumes_at_the_saved_offset_without_double_counting(tmp_path):
    p = tmp_path / "v.log"
    append(p, START, READY, STATS, OOM)
    t = tailer(tmp_path, p)
    t.poll()
    t.close()
    append(p, STATS, OOM)  # written while the daemon was down
    t2 = tailer(tmp_path, p)
    t2.poll()
    assert ooms(t2) == 2
    assert t2.analyzer.epoch.ready  # the stage machine's state came back too


def test_restart_after_rotation_while_down_finishes_the_old_file(tmp_path):
    p = tmp_path / "v.log"
    append(p, START, READY, STATS)
    t = tailer(tmp_path, p)
    t.poll()
    t.close()
    append(p, OOM)
    os.rename(p, str(p) + ".1")
    append(p, START, READY, STATS, OOM)
    t2 = tailer(tmp_path, p)
    t2.poll()
    assert ooms(t2) == 2


def test_damaged_state_file_is_reported_and_ignored(tmp_path, caplog):
    p = tmp_path / "v.log"
    append(p, START, OOM)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "s.tail.json").write_text("{not json")
    t = tailer(tmp_path, p)
    t.poll()
    assert ooms(t) == 1
    assert "cannot use state file" in caplog.text


def test_cri_partial_lines_across_polls_and_restart(tmp_path):
    p = tmp_path / "c.log"
    stamp = "2026-08-16T12:00:01.000000001Z stderr"
    append(p, f"{stamp} F {START}", f"{stamp} P {OOM[:40]}")
    t = tailer(tmp_path, p)
    t.poll()
    t.close()  # persisted at the start of the pending partial line
    append(p, f"{stamp} F {OOM[40:]}")
    t2 = tailer(tmp_path, p)
    t2.poll()
    assert ooms(t2) == 1
    assert t2.analyzer.events[-1].evidence.startswith("torch.OutOfMemoryError")


def test_runaway_line_is_cut_and_counted(tmp_path):
    p = tmp_path / "v.log"
    t = LogTailer("s", LogSource(str(p)), None, max_line_bytes=1000)
    with open(p, "w") as f:
        f.write(START + "\n" + "x" * 5_000_000)
    t.poll()
    with open(p, "a") as f:
        f.write("y" * 1000 + "\n" + OOM + "\n")
    t.poll()
    assert ooms(t) == 1 and t.health.bytes_skipped >= 5_000_000 and t.health.lines_cut == 1


def test_glob_follows_the_newest_pod_log(tmp_path):
    old = tmp_path / "vllm_vllm-0_aaaa" / "vllm"
    old.mkdir(parents=True)
    append(old / "0.log", START, READY, OOM)
    t = LogTailer("s", LogSource(str(tmp_path / "vllm_vllm-0_*" / "vllm" / "*.log")), str(tmp_path / "state"))
    t.poll()
    assert ooms(t) == 1
    new = tmp_path / "vllm_vllm-0_bbbb" / "vllm"  # the pod was recreated with a new UID
    new.mkdir(parents=True)
    append(old / "0.log", STATS)
    import time as _t

    _t.sleep(0.01)
    append(new / "0.log", START, OOM)
    t.poll()
    assert ooms(t) == 2 and t.path.endswith("bbbb/vllm/0.log") and t.health.rotations == 1
    t.close()
    t2 = LogTailer("s", LogSource(str(tmp_path / "vllm_vllm-0_*" / "vllm" / "*.log")), str(tmp_path / "state"))
    t2.poll()
    assert ooms(t2) == 2  # resumed, not re-read


def test_rotation_in_a_loop_by_rename_copytruncate_delete_and_recreate(tmp_path):
    import random
    import shutil

    p = tmp_path / "v.log"
    append(p, START)
    t = tailer(tmp_path, p)
    rng = random.Random(5)
    written = 0
    for i in range(60):
        for _ in range(rng.randrange(1, 30)):
            append(p, STATS)
        if rng.random() < 0.5:
            append(p, OOM, STATS)
            written += 1
        if rng.random() < 0.5:
            t.poll()
        how = i % 4
        if how == 0:  # rename, new file
            os.replace(p, str(p) + ".1")
            append(p, START)
        elif how == 1:  # copytruncate: copy to .1, truncate in place
            shutil.copyfile(p, str(p) + ".1")
            with open(p, "r+") as f:
                f.truncate(0)
        elif how == 2:  # deleted and recreated
            t.poll()
            os.remove(p)
            t.poll()
            append(p, START)
        else:  # truncated mid-line by a writer that died, then it goes on
            with open(p, "a") as f:
                f.write(STATS[:20])
            t.poll()
            with open(p, "a") as f:
                f.write(STATS[20:] + "\n")
        t.poll()
    t.poll()
    assert ooms(t) == written and written > 10
    assert t.health.rotations >= 15 and t.health.truncations >= 15


# Lines that once raised out of the analyzer or the decoder (issue 14, item 7): a number past int()'s 4300
# digits, one past float's range, and a docker json record nested 5000 deep (json raises RecursionError).
POISON_PLAIN = [
    "INFO 10-01 09:00:45 gpu_executor.py:122] # GPU blocks: " + "9" * 5000 + ", # CPU blocks: 2048",
    "(EngineCore_DP0 pid=2) INFO 08-16 12:00:30 [kv_cache_utils.py:1] GPU KV cache size: " + "9" * 400 + " tokens",
]
NESTED_DOCKER = '{"log": ' + "[" * 5000 + "]" * 5000 + ', "stream": "stderr"}'


def docker_record(text: str) -> str:
    import json

    return json.dumps({"log": text + "\n", "stream": "stderr", "time": "2026-08-16T12:00:01.000000001Z"})


def test_poison_lines_lose_no_oom_and_the_offset_matches_what_was_counted(tmp_path):
    p = tmp_path / "v.log"
    lines = [START, READY]
    for i in range(10):
        lines += [POISON_PLAIN[i % 2], OOM, STATS]
    append(p, *lines)
    t = tailer(tmp_path, p)
    t.poll()  # must not raise, and must not stop at the first poison line
    assert ooms(t) == 10
    t.close()
    t2 = tailer(tmp_path, p)  # a restart resumes where the count stands: nothing counted again
    t2.poll()
    assert ooms(t2) == 10
    append(p, OOM)
    t2.poll()
    assert ooms(t2) == 11


def test_docker_record_nested_5000_deep_is_counted_and_passed_over(tmp_path):
    p = tmp_path / "d.log"
    # first: the format is still told from the lines after it; ready, so each failure is a runtime one that the
    # stats line after it closes (a startup failure would be one incident: nothing ends it but a restart)
    lines = [NESTED_DOCKER, docker_record(START), docker_record(READY)]
    for _ in range(5):
        lines += [NESTED_DOCKER, docker_record(OOM), docker_record(STATS)]
    append(p, *lines)
    t = tailer(tmp_path, p)
    t.poll()
    assert t._decoder is not None and t._decoder.format == "docker"
    assert ooms(t) == 5
    assert t.health.read_errors == 6  # each nested record, counted (vllm_headroom_log_read_errors_total)
    t.close()
    t2 = tailer(tmp_path, p)
    t2.poll()
    assert ooms(t2) == 5


def test_symlink_flipped_back_and_forth_counts_each_oom_once(tmp_path):
    a, b, link = tmp_path / "a.log", tmp_path / "b.log", tmp_path / "current.log"
    append(a, START, READY)
    append(b, START, READY)
    os.symlink(a, link)
    t = tailer(tmp_path, link)
    t.poll()
    written = 0
    for i in range(5):  # A -> B -> A -> B -> A -> B, an OOM in each before the flip
        target = a if i % 2 == 0 else b
        append(target, OOM, STATS)
        written += 1
        t.poll()
        os.remove(link)
        os.symlink(b if target == a else a, link)
        t.poll()
    assert ooms(t) == written
    t.close()
    t2 = tailer(tmp_path, link)  # the positions of both files survive a restart
    os.remove(link)
    os.symlink(a, link)
    t2.poll()
    assert ooms(t2) == written


def test_two_live_files_under_one_glob_count_each_oom_once(tmp_path):
    d = tmp_path / "pods"
    d.mkdir()
    old, new = d / "old.log", d / "new.log"  # a rolling update: both pods still write
    append(old, START, READY)
    append(new, START, READY)
    t = LogTailer("s", LogSource(str(d / "*.log")), str(tmp_path / "state"))
    written = 0
    for i in range(8):
        target = old if i % 2 == 0 else new
        append(target, OOM, STATS)
        written += 1
        os.utime(target, (1_000_000 + i, 1_000_000 + i))  # this one is the newest now, whatever the clock
        t.poll()
    assert ooms(t) == written


def test_state_with_a_null_offset_is_refused_not_resumed(tmp_path, caplog):
    import json

    p = tmp_path / "v.log"
    append(p, START, READY, OOM, STATS)
    t = tailer(tmp_path, p)
    t.poll()
    t.close()
    state = tmp_path / "state" / "s.tail.json"
    data = json.loads(state.read_text())
    data["offset"] = None  # valid JSON, wrong: it once resumed from byte 0 with the counters kept
    state.write_text(json.dumps(data))
    t2 = tailer(tmp_path, p)
    t2.poll()
    assert ooms(t2) == 1
    assert "cannot use state file" in caplog.text and "offset" in caplog.text


def test_concurrent_saves_never_collide_and_leave_no_temp_files(tmp_path, caplog):
    import json
    import threading

    p = tmp_path / "v.log"
    append(p, START, READY, OOM)
    t = tailer(tmp_path, p)
    t.poll()

    def save_many() -> None:
        for _ in range(150):
            t.save_state(force=True)

    threads = [threading.Thread(target=save_many) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert "cannot write state file" not in caplog.text
    assert sorted(os.listdir(tmp_path / "state")) == ["s.tail.json"]
    assert json.loads((tmp_path / "state" / "s.tail.json").read_text())["analyzer"]["counts"]["oom"] == 1


def test_a_failed_save_leaves_no_temp_file_and_is_retried(tmp_path):
    p = tmp_path / "v.log"
    append(p, START, OOM)
    t = tailer(tmp_path, p)
    t.poll()
    state = tmp_path / "state" / "s.tail.json"
    if state.exists():
        state.unlink()
    state.mkdir(parents=True)  # the rename onto it fails
    t.save_state(force=True)
    assert sorted(os.listdir(tmp_path / "state")) == ["s.tail.json"]
    assert t._dirty  # tried again at the next save


def test_file_opened_empty_and_read_in_the_same_poll_is_recognised_after_a_restart(tmp_path):
    p = tmp_path / "v.log"
    append(p, START, READY)
    t = tailer(tmp_path, p)
    t.poll()
    os.rename(p, str(p) + ".1")
    p.write_text("")  # the new file is empty when the tailer opens it ...
    t.poll()
    append(p, OOM, STATS)
    t._drain()  # ... and has grown by the time it is read in that same poll (the race, made deterministic)
    t.close()
    t2 = tailer(tmp_path, p)  # once recounted everything from byte 0
    t2.poll()
    assert ooms(t2) == 1
    append(p, OOM)
    os.rename(p, str(p) + ".1")  # rotated while stopped: what was not read yet is finished from path.1
    t2.close()
    p.write_text("")
    t3 = tailer(tmp_path, p)
    t3.poll()
    assert ooms(t3) == 2


def test_copytruncate_regrown_to_exactly_the_old_size_is_noticed(tmp_path):
    import shutil

    p = tmp_path / "v.log"
    append(p, START, READY, STATS)
    t = tailer(tmp_path, p)
    t.poll()
    size = os.path.getsize(p)
    shutil.copyfile(p, str(p) + ".1")
    with open(p, "r+") as f:
        f.truncate(0)
    line = OOM + " " * 10  # padded so the file comes back to exactly its old size
    head = START + "\n" + READY + "\n"  # the same first bytes as before
    with open(p, "w") as f:
        f.write(head + line + "x" * (size - len(head) - len(line) - 1) + "\n")
    assert os.path.getsize(p) == size
    st = os.stat(p)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # a coarse clock must not hide the write
    assert t.needs_poll()
    t.poll()
    assert ooms(t) == 1 and t.health.truncations == 1


def test_an_unreadable_log_is_warned_about_once_not_every_poll(tmp_path, caplog, monkeypatch):
    import builtins

    p = tmp_path / "v.log"
    append(p, START)
    real_open = builtins.open

    def denied(path, *args, **kwargs):
        if str(path) == str(p):
            raise PermissionError(13, "Permission denied", str(p))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", denied)  # as root, chmod 000 would not stop us
    t = tailer(tmp_path, p)
    for _ in range(20):
        t.poll()
    assert t.health.read_errors == 20
    assert caplog.text.count("cannot open") == 1


def test_a_line_after_a_copytruncate_hole_of_nuls_is_read(tmp_path):
    p = tmp_path / "v.log"
    with open(p, "wb") as f:
        f.write((START + "\n").encode() + b"\x00" * 4096 + (OOM + "\n").encode())
    t = tailer(tmp_path, p)
    t.poll()
    assert ooms(t) == 1


def test_a_scrape_that_found_the_server_serving_counts_only_once_every_line_is_read(tmp_path):
    """note_serving (the daemon calls it after a good scrape) makes a bare failure a runtime one; lines still
    unread may hold a restart, so then it is not heard."""
    bare = OOM.replace("(EngineCore_DP0 pid=2) ", "")

    def stage_after(serving_seen: bool, unread: tuple[str, ...] = ()) -> str:
        p = tmp_path / f"{serving_seen}-{len(unread)}.log"
        append(p, "WARNING 08-16 12:00:59 [protocol.py:93] The following fields were present in the request")
        t = tailer(tmp_path, p)
        t.poll()
        append(p, *unread)
        if serving_seen:
            t.note_serving()
        append(p, bare)
        t.poll()
        t.poll()  # quiet: an undecided failure is counted now
        ((stage, _phase),) = t.analyzer.oom_counts
        return stage, t.analyzer.first_oom.stage_evidence

    assert stage_after(False) == (UNDECIDED_STAGE, "none")
    assert stage_after(True) == ("runtime_unknown", "readiness")
    assert stage_after(True, unread=(START,)) == (
        "loading_unknown",
        "marker",
    )  # a restart not read yet: the scrape is not its


def test_a_checked_poll_reads_what_its_stat_saw_and_the_next_poll_the_rest(tmp_path):
    p = tmp_path / "v.log"
    append(p, START, READY)
    t = tailer(tmp_path, p)
    t.poll()
    append(p, STATS)
    assert t.needs_poll()
    append(p, OOM)  # written after the daemon's stat: the next poll's
    assert t.poll(checked=True) == 1 and ooms(t) == 0
    assert t.needs_poll()
    assert t.poll(checked=True) == 1 and ooms(t) == 1
    assert not t.needs_poll()


def test_offsets_alone_are_saved_every_minute_a_moved_counter_within_the_interval(tmp_path, monkeypatch):
    import json
    import time

    from exporter.logs import tailer as tailer_module

    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    p = tmp_path / "v.log"
    append(p, START, READY, *[STATS] * 8)  # past the 1 KB fingerprint, which widens (and is saved) until then
    t = LogTailer("s", LogSource(str(p), "auto"), str(tmp_path / "state"), save_every_s=10)
    t.poll()
    state = tmp_path / "state" / "s.tail.json"

    def saved() -> dict:
        return json.loads(state.read_text())

    first = saved()["offset"]
    for _ in range(tailer_module.OFFSETS_ONLY_SAVE_FACTOR - 1):  # healthy stats lines: only the offset moves
        clock[0] += 10
        append(p, STATS)
        t.poll()
        assert saved()["offset"] == first
    clock[0] += 10
    append(p, STATS)
    t.poll()
    assert saved()["offset"] > first  # a minute: the offsets are saved too
    clock[0] += 5
    append(p, OOM)
    t.poll()
    assert "oom" not in saved()["analyzer"]["counts"]  # within the interval of the last save
    clock[0] += 5
    t.save_if_due()
    assert saved()["analyzer"]["counts"]["oom"] == 1
    assert saved()["offset"] == os.path.getsize(p)
    t.analyzer.epoch.facts["probe"] = 1  # a fact changed in place (the snapshot shares the dict): still seen
    t._dirty = True
    clock[0] += 10
    t.save_if_due()
    assert saved()["analyzer"]["epoch"]["facts"]["probe"] == 1
