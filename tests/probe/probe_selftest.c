/*
 * Checks that tls_dtor_probe.c sees what it is meant to see: this program registers a
 * thread-local destructor on its main thread exactly as Rust's std does (through
 * __cxa_thread_atexit_impl). The test builds it under a name containing "job_submit_cinch", so
 * the probe, preloaded, must record exactly one line.
 */
#include <stdio.h>

extern int __cxa_thread_atexit_impl(void (*func)(void *), void *obj, void *dso_symbol);
extern void *__dso_handle;

static int value;

static void destructor(void *obj)
{
	(void)obj;
}

int main(void)
{
	return __cxa_thread_atexit_impl(destructor, &value, &__dso_handle) == 0 ? 0 : 1;
}
