/*
 * A QEMU TCG plugin (user mode) that counts the guest instructions executed
 * per ELF symbol, for tools/qemu_insn_share.py: callgrind's exclusive
 * instruction counts for the aarch64 tiers, which this project can only run
 * under qemu-user. Each translation block is charged to the symbol of its
 * first instruction (a block ends at a branch, so it never spans two
 * functions), by an inline counter add: no callback per execution.
 *
 * At exit it writes "<count> <symbol>" lines, one per symbol, to the file
 * named by the plugin argument `out=FILE`.
 *
 * Written against QEMU 7.2's plugin API (Debian bookworm's qemu-user),
 * QEMU_PLUGIN_VERSION 1; the declarations below are the few it uses, as
 * qemu-plugin.h states them, so that no QEMU source tree is needed to build
 * it: `gcc -shared -fPIC -O2 -o insn_by_symbol.so insn_by_symbol.c`.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

typedef uint64_t qemu_plugin_id_t;
typedef struct qemu_info_t qemu_info_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };
typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
typedef void (*qemu_plugin_udata_cb_t)(qemu_plugin_id_t id, void *userdata);

extern void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_tb_trans_cb_t cb);
extern void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, qemu_plugin_udata_cb_t cb, void *userdata);
extern size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
extern struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
extern const char *qemu_plugin_insn_symbol(const struct qemu_plugin_insn *insn);
extern void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb, enum qemu_plugin_op op, void *ptr,
                                                     uint64_t imm);

__attribute__((visibility("default"))) int qemu_plugin_version = 1;

/* one counter per symbol, found by the address of the symbol's name: QEMU
 * hands out the same string from its symbol table for every block of a
 * function (open addressing; a name seen at two addresses would merely
 * print twice, and the script adds the lines up) */
struct slot {
    const char *symbol;
    uint64_t count;
};

#define SLOTS (1u << 20)
static struct slot *slots;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char *out_path;

static uint64_t *counter_for(const char *symbol)
{
    const char *name = symbol ? symbol : "?";
    uintptr_t h = ((uintptr_t)name >> 3) * 0x9E3779B97F4A7C15ull;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < SLOTS; i++) {
        struct slot *s = &slots[(h + i) & (SLOTS - 1)];
        if (s->symbol == name || s->symbol == NULL) {
            s->symbol = name;
            pthread_mutex_unlock(&lock);
            return &s->count;
        }
    }
    fprintf(stderr, "insn_by_symbol: more than %u symbols\n", SLOTS);
    abort();
}

static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    size_t n = qemu_plugin_tb_n_insns(tb);
    if (n == 0) {
        return;
    }
    const char *symbol = qemu_plugin_insn_symbol(qemu_plugin_tb_get_insn(tb, 0));
    qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, counter_for(symbol), n);
}

static void at_exit(qemu_plugin_id_t id, void *userdata)
{
    (void)id;
    (void)userdata;
    FILE *f = fopen(out_path, "w");
    if (!f) {
        perror(out_path);
        return;
    }
    for (size_t i = 0; i < SLOTS; i++) {
        if (slots[i].count) {
            fprintf(f, "%llu %s\n", (unsigned long long)slots[i].count, slots[i].symbol);
        }
    }
    fclose(f);
}

__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc,
                                                               char **argv)
{
    (void)info;
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "out=", 4) == 0) {
            out_path = strdup(argv[i] + 4);
        }
    }
    if (!out_path) {
        fprintf(stderr, "insn_by_symbol: needs out=FILE\n");
        return -1;
    }
    /* one table for the whole run, never moved: the blocks' inline adds
     * hold the counters' addresses */
    slots = calloc(SLOTS, sizeof *slots);
    if (!slots) {
        return -1;
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
    return 0;
}
