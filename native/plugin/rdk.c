/* librdkafka's functions, found at run time in the copy the process loaded (see kaudit_plugin.h), and the
 * version gate: the plugin runs only inside the librdkafka versions it is tested with. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

#include "kaudit_plugin.h"

RdkApi rdk;
static int found = 0;
static char found_problem[512] = "not looked up yet";
static pthread_once_t lookup_once = PTHREAD_ONCE_INIT;

typedef struct {
    char path[PATH_MAX];
    int matches;
} LibrarySearch;

static int match_rdkafka(struct dl_phdr_info *info, size_t size, void *data) {
    LibrarySearch *search = data;
    const char *name = info->dlpi_name;
    const char *base = name ? strrchr(name, '/') : NULL;
    if (base != NULL && strncmp(base + 1, "librdkafka", 10) == 0 && strncmp(base + 1, "librdkafka++", 12) != 0) {
        if (search->matches++ == 0) snprintf(search->path, sizeof search->path, "%s", name);
    }
    return 0;
}

/* The version as x.y.z, from librdkafka's hex form 0xMMmmrrpp. */
static void version_text(int version, char *text, size_t size) {
    snprintf(text, size, "%d.%d.%d", (version >> 24) & 0xff, (version >> 16) & 0xff, (version >> 8) & 0xff);
}

static int check_version(void) {
    int version = rdk.version();
    if ((version & ~0xff) >= (KAUDIT_RDKAFKA_LOWEST & ~0xff) && (version & ~0xff) < KAUDIT_RDKAFKA_BEYOND) return 1;
    char running[32], lowest[32], beyond[32];
    version_text(version, running, sizeof running);
    version_text(KAUDIT_RDKAFKA_LOWEST, lowest, sizeof lowest);
    version_text(KAUDIT_RDKAFKA_BEYOND, beyond, sizeof beyond);
    snprintf(found_problem, sizeof found_problem,
             "librdkafka %s is outside the versions this plugin is tested with (%s up to, not including, %s): "
             "rebuild it (make native) against this librdkafka's rdkafka.h, or use a tested librdkafka",
             running, lowest, beyond);
    return 0;
}

#define RDK_NAME(name) "rd_kafka_" #name,

static void look_up(void) {
    LibrarySearch search = {.matches = 0};
    dl_iterate_phdr(match_rdkafka, &search);
    if (search.matches != 1) {
        /* Two copies could be two versions: only the one that loaded the plugin is safe, and we cannot tell which. */
        snprintf(found_problem, sizeof found_problem, "%d librdkafka libraries loaded in this process, need exactly 1",
                 search.matches);
        return;
    }
    void *library = dlopen(search.path, RTLD_NOW | RTLD_NOLOAD);
    if (library == NULL) {
        snprintf(found_problem, sizeof found_problem, "dlopen %.300s: %.150s", search.path, dlerror());
        return;
    }
    static const char *names[] = {RDK_FUNCTIONS(RDK_NAME)};
    void **slots = (void **)&rdk;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        slots[i] = dlsym(library, names[i]);
        if (slots[i] == NULL) {
            snprintf(found_problem, sizeof found_problem, "%.400s has no %.80s", search.path, names[i]);
            return;
        }
    }
    found = check_version();
}

int rdk_ready(char *problem, size_t problem_size) {
    pthread_once(&lookup_once, look_up);
    if (!found && problem != NULL) snprintf(problem, problem_size, "%s", found_problem);
    return found;
}
