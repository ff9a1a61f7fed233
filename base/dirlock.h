/* dirlock.h — one run per directory: an exclusive lock on DIR/.lock held for the life of the
 * process; and the same kind of lock, shared or exclusive, on any file.
 *
 * The lock is a POSIX record lock (fcntl F_SETLK) on DIR/.lock, not flock(): the kernel drops
 * it when the process ends, however it ends (so a SIGKILLed or crashed run leaves no stale
 * lock to clean up), and unlike flock(), which on NFS is local to one client in older kernels
 * and the reason HDF5's own file locking fails there, fcntl locks are kept by the NFS server
 * (NLM / NFSv4) and by Lustre (mounted with -o flock, the usual setting on clusters). The file
 * holds the holder's host, pid and start time, for the message another run gets. */
#ifndef CT_DIRLOCK_H
#define CT_DIRLOCK_H

/* Take the lock of dir (which must exist), waiting up to wait_s seconds (0: not at all) for a
 * holder to release it. Returns a descriptor to keep open while the lock is needed (closing
 * it, or exiting, releases the lock), or -1 with a message naming dir and the holder
 * ("... is in use by another ctrain run (host n1, pid 1234, since 2026-11-22T14:00:00Z)"), also
 * when a stop signal (stop.h) comes while waiting. */
int ct_dir_lock(const char *dir, double wait_s);

/* The same kind of lock on any file, shared (any number of holders, none exclusive) or
 * exclusive: e.g. every run reading a data copy holds it shared, and whoever (re)builds or
 * removes the copy takes it exclusive (src/cli/golf_import.c). A process holds one kind per file;
 * asking for the other converts the lock (exclusive -> shared never waits). Closing any
 * descriptor of the file in this process releases the lock. */
enum { CT_LOCK_NONE, CT_LOCK_SHARED, CT_LOCK_EXCLUSIVE };
/* Set fd's lock to kind (CT_LOCK_NONE: release it) without waiting: 0 when done, 1 when
 * another process holds a lock in the way, -1 on error (errno set). */
int ct_lock_try(int fd, int kind);
/* Open path (created if absent, a symbolic link refused) and lock it as kind, waiting up to
 * wait_s seconds for holders in the way and saying so once on stderr ("waiting up to N s for
 * <what>"). Returns the descriptor, or -1 with a message naming what and path (also when a
 * stop signal, stop.h, comes while waiting). */
int ct_lock_file(const char *path, int kind, double wait_s, const char *what);

#endif
