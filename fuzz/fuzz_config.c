/* fuzz_config.c - libFuzzer harness: config.json text (transformers' and
 * timm's) and preprocessor_config.json text through rai_config_parse; what
 * it accepts must be well formed: keys that fit, values, labels a JSON
 * array; a model's config names its arch first, a preprocessor's only the
 * image transform (transform.*, mean, std). */
#include "models/config.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    rai_config_item *it = NULL;
    int n = 0;
    if (rai_config_parse((const char *)data, size, &it, &n) != RA_OK) {
        if (it || n) abort();
        return 0;
    }
    int model = n > 0 && !strcmp(it[0].key, "arch");
    for (int i = 0; i < n; i++) {
        if (!it[i].key[0] || !it[i].value || !it[i].from[0]) abort();
        if (!model && strncmp(it[i].key, "transform.", 10) && strcmp(it[i].key, "mean") &&
            strcmp(it[i].key, "std"))
            abort();
        if (!strcmp(it[i].key, "labels")) {
            json_t *a = json_loads(it[i].value, 0, NULL);
            if (!json_is_array(a)) abort();
            json_decref(a);
        }
    }
    rai_config_free(it, n);
    return 0;
}
