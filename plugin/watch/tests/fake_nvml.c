/* A stand-in for the driver's libnvidia-ml.so (the calls cinch-watch makes), for tests on
 * machines without a GPU: FAKE_NVML_GPUS devices (default 16), minor numbers 0.., each
 * FAKE_NVML_BUSY percent busy (default 0) with FAKE_NVML_USED_MIB MiB in use (default 0).
 * The per-cgroup memory limit (CUDA 13.4 drivers) appends "minor cgroup soft hard" to
 * FAKE_NVML_LIMITS_LOG for every call and takes the limit only on FAKE_NVML_LIMITS_AT (any
 * cgroup if unset), answering NVML_ERROR_NOT_FOUND elsewhere, as the driver's dmem backend
 * does for a cgroup without limit files; built with -DNO_MEMORY_LIMITS, an older driver. */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

typedef int nvmlReturn_t;
typedef void *nvmlDevice_t;
typedef struct { unsigned int gpu; unsigned int memory; } nvmlUtilization_t;
typedef struct {
	unsigned int version;
	unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

static unsigned env(const char *name, unsigned fallback)
{
	const char *v = getenv(name);
	return v ? (unsigned)strtoul(v, NULL, 10) : fallback;
}

nvmlReturn_t nvmlInit_v2(void) { return 0; }
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; return 0; }
nvmlReturn_t nvmlShutdown(void) { return 0; }
const char *nvmlErrorString(nvmlReturn_t r) { (void)r; return "fake NVML error"; }

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
	*count = env("FAKE_NVML_GPUS", 16);
	return 0;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
	if (index >= env("FAKE_NVML_GPUS", 16))
		return 2; /* NVML_ERROR_INVALID_ARGUMENT */
	*device = (nvmlDevice_t)(uintptr_t)(index + 1);
	return 0;
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor)
{
	*minor = (unsigned)((uintptr_t)device - 1);
	return 0;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *u)
{
	(void)device;
	u->gpu = env("FAKE_NVML_BUSY", 0);
	u->memory = 0;
	return 0;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *m)
{
	(void)device;
	m->total = 80ULL << 30;
	m->used = (unsigned long long)env("FAKE_NVML_USED_MIB", 0) << 20;
	m->free = m->total - m->used;
	m->reserved = 0;
	return 0;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
	snprintf(version, length, "%s", "615.00.00-fake");
	return 0;
}

#ifndef NO_MEMORY_LIMITS
typedef struct {
	const char *nameSpace;
	unsigned long long softLimit;
	unsigned long long hardLimit;
} nvmlSetMemoryLimits_v1_t;

nvmlReturn_t nvmlDeviceSetMemoryLimits_v1(nvmlDevice_t device, nvmlSetMemoryLimits_v1_t *limits)
{
	const char *log = getenv("FAKE_NVML_LIMITS_LOG");
	const char *at = getenv("FAKE_NVML_LIMITS_AT");
	if (log) {
		FILE *f = fopen(log, "a");
		if (f) {
			fprintf(f, "%u %s %llu %llu\n", (unsigned)((uintptr_t)device - 1),
				limits->nameSpace, limits->softLimit, limits->hardLimit);
			fclose(f);
		}
	}
	if (at && strcmp(at, limits->nameSpace) != 0)
		return 6; /* NVML_ERROR_NOT_FOUND */
	return 0;
}
#endif
