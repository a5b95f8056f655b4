/*
 * LD_PRELOAD probe for slurmctld, used by cinch's end-to-end tests.
 *
 * glibc runs the thread-local destructors a thread registered (__cxa_thread_atexit_impl) when
 * that thread ends; for slurmctld's main thread that is inside exit(), after other threads
 * may still be in cinch's code. A destructor of job_submit_cinch.so registered on the main
 * thread is how slurmctld once crashed at exit, so this probe records every such registration
 * in the file named by CINCH_TLS_PROBE (one line each) and then does what glibc would.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef int (*register_fn)(void (*)(void *), void *, void *);

int __cxa_thread_atexit_impl(void (*func)(void *), void *obj, void *dso_symbol)
{
	static register_fn real;
	Dl_info info;
	const char *out = getenv("CINCH_TLS_PROBE");

	if (!real)
		real = (register_fn)dlsym(RTLD_NEXT, "__cxa_thread_atexit_impl");
	if (out && syscall(SYS_gettid) == getpid() && dladdr((void *)func, &info) &&
	    info.dli_fname && strstr(info.dli_fname, "job_submit_cinch")) {
		FILE *f = fopen(out, "a");
		if (f) {
			fprintf(f, "slurmctld's main thread registered a destructor of %s: %s\n",
				info.dli_fname, info.dli_sname ? info.dli_sname : "(no symbol)");
			fclose(f);
		}
	}
	return real ? real(func, obj, dso_symbol) : -1;
}
