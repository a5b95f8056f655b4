/* A stand-in for the driver's libnvidia-ml.so (the calls cinch-watch makes), for tests on
 * machines without a GPU: FAKE_NVML_GPUS devices (default 16), minor numbers 0.., each
 * FAKE_NVML_BUSY percent busy (default 0) with FAKE_NVML_USED_MIB MiB in use (default 0). */
#include <stdlib.h>
#include <stdint.h>

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
