"""Changes perflab makes to the host for an experiment, and their undoing.

- `knobs`: machine settings as factors ([host]: huge pages, transparent huge
  pages, any sysctl, dropping the page cache, a block device's I/O scheduler
  and readahead, the CPU frequency governor);
- `cgroups`: limits on a managed server's whole process tree
  ([target.resources]: cpuset, CPU quota, memory, I/O bandwidth), cgroup v2
  or v1;
- `scratchfs`: loop-backed scratch filesystems for a server's data and WAL
  ([target.storage] data_fs, wal_fs).

One rule for all three: every change is journaled (`perflab.guardian.journal()
.add`) before it is made and withdrawn once perflab has undone it itself, so
the guardian undoes it after a SIGKILL and a later perflab start undoes what
a dead guardian left (the journal file). Everything made is named `perflab...`.
Each module's preflight (`..._problems`) finds, without changing anything,
what would stop it: a knob the machine lacks, a read-only /proc/sys, a missing
tool, not being root. `perflab check` reports those with exit status 2.
"""
