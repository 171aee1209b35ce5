"""perflab.proc, the one reader of /proc/PID, against real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from perflab import proc


def test_a_live_process_its_children_and_a_reaped_one() -> None:
    # a child that starts a grandchild (sleep), both ours to end
    child = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; "
                              "subprocess.Popen(['sleep', '30']); sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while not proc.children(child.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        [grandchild] = proc.children(child.pid)
        assert proc.descendants(os.getpid()).count(grandchild) == 1
        assert proc.pid_alive(child.pid) and proc.pid_alive(grandchild)
        assert "sleep 30" in proc.cmdline(grandchild)
        start = proc.start_time(child.pid)
        assert start is not None and start.isdigit() and start == proc.start_time(child.pid)
        assert proc.start_time(grandchild) != start or grandchild != child.pid
        assert proc.tracer_pid(child.pid) == 0
        cpu = proc.cpu_seconds(os.getpid())
        assert cpu is not None and cpu > 0
    finally:
        for pid in proc.children(child.pid):
            if "sleep 30" in proc.cmdline(pid):
                os.kill(pid, 9)
        child.kill()
        assert child.stdin is not None
        child.stdin.close()
    # killed but not yet reaped: a zombie, not alive
    deadline = time.monotonic() + 10
    while proc.stat_fields(child.pid) is not None and proc.stat_fields(child.pid)[proc.STATE] != "Z" \
            and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not proc.pid_alive(child.pid)
    child.wait()
    # reaped: gone, and every reader says so without raising
    assert proc.stat_fields(child.pid) is None and proc.start_time(child.pid) is None
    assert proc.cmdline(child.pid) == "" and proc.cpu_seconds(child.pid) is None
    assert proc.children(child.pid) == []


def test_a_command_name_with_spaces_and_parentheses_is_split_after_its_last_paren() -> None:
    fields = proc.split_stat(b"42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 7 3 0 0 20 0 1 0 12345 0")
    assert fields[proc.STATE] == "S" and fields[proc.PPID] == "1" and fields[proc.STARTTIME] == "12345"
    assert int(fields[proc.UTIME]) + int(fields[proc.STIME]) == 10
