-- Measurement store, version 3. Append-only: versions 1 and 2 stay as they were written; this file only adds.
--
-- Runs: who is recording a run still `incomplete`, so `measurements prune` can tell a run being recorded right now
-- from one whose recorder died (issue 24): the host name, the kernel's boot id (/proc/sys/kernel/random/boot_id),
-- the pid namespace (/proc/self/ns/pid), the pid, and the process's start time in clock ticks after boot (field 22
-- of /proc/self/stat), which tells a reused pid from the recorder. NULL: not recorded (runs written by versions 1
-- and 2, imports, which are written complete in one transaction, and what a platform without /proc cannot say).
ALTER TABLE run ADD COLUMN owner_host TEXT;
ALTER TABLE run ADD COLUMN owner_boot_id TEXT;
ALTER TABLE run ADD COLUMN owner_pid_namespace TEXT;
ALTER TABLE run ADD COLUMN owner_pid INTEGER CHECK (owner_pid IS NULL OR owner_pid > 0);
ALTER TABLE run ADD COLUMN owner_started_ticks INTEGER CHECK (owner_started_ticks IS NULL OR owner_started_ticks >= 0);

-- Imports: a stable identity of what a run was imported from (an export's host and run, a llama-bench file's
-- rows, a load log's bytes), unique, so importing the same thing twice, or ten times at once, records one run.
-- NULL for runs recorded here (NULLs are distinct in a UNIQUE index).
ALTER TABLE run ADD COLUMN import_key TEXT;
CREATE UNIQUE INDEX run_import_key ON run (import_key);
