"""Collectors: telemetry samplers on the run's monotonic clock. One module each."""

from perflab.registry import Registry

COLLECTORS = Registry("collector")
COLLECTORS.register("vmstat", "perflab.collectors.vmstat:VmstatCollector", "CPU, memory, swap, bi/bo, interrupts, context switches (as vmstat)")
COLLECTORS.register("diskstats", "perflab.collectors.diskstats:DiskstatsCollector", "per-device IOPS, KiB/s, await, aqu-sz, %util (as iostat -x)")
COLLECTORS.register("process", "perflab.collectors.process:ProcessCollector", "CPU, memory and I/O of the server's processes by role, and of perflab")
COLLECTORS.register("pgstat", "perflab.collectors.pgstat:PgstatCollector", "PostgreSQL statistics views per interval and sampled wait events")
COLLECTORS.register("mysqlstat", "perflab.collectors.mysqlstat:MysqlstatCollector", "MySQL/MariaDB SHOW GLOBAL STATUS per interval (statements by kind, InnoDB) and performance_schema waits", needs=("pymysql",))
COLLECTORS.register("energy", "perflab.collectors.energy:EnergyCollector", "joules and watts from RAPL, or estimated from CPU use and TDP")
COLLECTORS.register("syscalls", "perflab.collectors.syscalls:SyscallsCollector", "the server's fsync, fdatasync, read, write, seek, open, close by file class (wal, base, global): counts, latency, every sync (bpftrace, else strace; root)")
COLLECTORS.register("storage", "perflab.collectors.storage:StorageCollector", "fio on each role's filesystem (data, WAL) once per layout before the run: sequential MB/s, 8 KiB random-write IOPS, fdatasync latency (the storage study's Bonnie table)")
