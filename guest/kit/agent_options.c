/* The perf agent's options: `stat|record [-e <ev>,...] [-c <period> | -F <hz>] [-p] [-g] -- <args>`. */
#include "agent_internal.h"

/* -p with PV reads: at most this long between two publishes (one doorbell exit each) */
#define DEFAULT_PUBLISH_US 1000
#define MIN_PERIOD 64 /* below ~20 the PMI handler's own counted exit path would livelock */

void agent_usage(void)
{
	printf("agent: usage: <guest> stat -e <ev>[,<ev>...] [-p] -- <args>\n"
	       "agent:        <guest> record -e <ev>[,<ev>...] -c <period> | -F <hz> [-p] [-g] -- <args>\n"
	       "agent:        -p with the PV page: [--pv-publish-us <us>] [--pv-check]\n"
	       "agent:   <ev> = 0xUUEE (umask, event select) or an architectural event name,\n"
	       "agent:          optionally =<the vendor's select> (AMD: 0xUUEEE, 12-bit event select),\n"
	       "agent:          then :u (user mode only) or :k (kernel only; both levels otherwise)\n");
}

int agent_parse_events(const char *list)
{
	while (*list) {
		char word[32];
		unsigned n = 0;
		while (*list && *list != ',') {
			if (n + 1 < sizeof(word))
				word[n++] = *list;
			list++;
		}
		word[n] = 0;
		if (*list == ',')
			list++;
		if (!n)
			continue;
		if (agent_nev >= AGENT_MAX_EVENTS) {
			printf("agent: at most %u events\n", AGENT_MAX_EVENTS);
			return -1;
		}
		uint8_t levels = AGENT_LEVEL_USR | AGENT_LEVEL_OS;
		char *colon = strchr(word, ':');
		if (colon) {
			*colon = 0;
			if (!strcmp(colon + 1, "u"))
				levels = AGENT_LEVEL_USR;
			else if (!strcmp(colon + 1, "k"))
				levels = AGENT_LEVEL_OS;
			else if (strcmp(colon + 1, "uk") && strcmp(colon + 1, "ku")) {
				printf("agent: bad modifier ':%s'\n", colon + 1);
				return -1;
			}
		}
		int has_sel = 0;
		unsigned long sel = 0;
		char *eq = strchr(word, '=');
		if (eq) {
			char *end;
			*eq = 0;
			sel = strtoul(eq + 1, &end, 0);
			if (*end || eq[1] == 0 || sel > 0xfffff) {
				printf("agent: bad event select '%s'\n", eq + 1);
				return -1;
			}
			has_sel = 1;
		}
		int code = -1;
		for (int a = 0; a < NR_ARCH_EVENTS; a++)
			if (!strcmp(word, arch_events[a].name))
				code = arch_events[a].select | arch_events[a].umask << 8;
		if (code < 0) {
			char *end;
			unsigned long v = strtoul(word, &end, 0);
			if (*end || v > 0xffff) {
				printf("agent: bad event '%s'\n", word);
				return -1;
			}
			code = (int)v;
		}
		agent_evs[agent_nev].code = (uint16_t)code;
		agent_evs[agent_nev].has_sel = (uint8_t)has_sel;
		agent_evs[agent_nev].levels = levels;
		agent_evs[agent_nev].given_sel = (uint32_t)sel;
		agent_evs[agent_nev].hw = NO_COUNTER;
		agent_nev++;
	}
	return 0;
}

/* Returns the index of the first workload word, or -1. */
int agent_parse_options(int argc, char **argv)
{
	int i = 2;
	unsigned long publish_us = DEFAULT_PUBLISH_US;
	agent_recording = !strcmp(argv[1], "record");
	for (; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--"))
			break;
		if (!strcmp(a, "-p")) {
			agent_per_task = 1;
		} else if (!strcmp(a, "--pv-publish-us") && i + 1 < argc) {
			/* -p with the PV page: the most time between two publishes (0: every switch) */
			char *end;
			unsigned long us = strtoul(argv[++i], &end, 0);
			if (*end) {
				printf("agent: bad publish interval '%s'\n", argv[i]);
				return -1;
			}
			publish_us = us;
		} else if (!strcmp(a, "--pv-check")) {
			agent_pv_check = 1; /* exact charges at every switch beside the shared-out ones */
		} else if (!strcmp(a, "-g") && agent_recording) {
			agent_call_graph = 1;
		} else if (!strcmp(a, "-e") && i + 1 < argc) {
			if (agent_parse_events(argv[++i]) < 0)
				return -1;
		} else if (!strcmp(a, "-F") && i + 1 < argc && agent_recording) {
			/* samples per second of the TSC: the period in cycles at the rate the VMM booted us with */
			char *end;
			unsigned long hz = strtoul(argv[++i], &end, 0);
			if (*end || !hz || !tsc_khz) {
				printf("agent: bad frequency '%s' (or no TSC rate)\n", argv[i]);
				return -1;
			}
			agent_period = tsc_khz * 1000 / hz;
			if (agent_period < MIN_PERIOD)
				agent_period = MIN_PERIOD;
		} else if (!strcmp(a, "-c") && i + 1 < argc && agent_recording) {
			char *end;
			agent_period = strtoul(argv[++i], &end, 0);
			if (*end || agent_period < MIN_PERIOD) {
				printf("agent: bad period '%s' (at least %u)\n", argv[i], MIN_PERIOD);
				return -1;
			}
		} else {
			printf("agent: unknown option '%s'\n", a);
			return -1;
		}
	}
	agent_pv_publish_ticks = tsc_khz * publish_us / 1000;
	return i < argc ? i + 1 : i; /* no "--": the workload gets no arguments */
}
