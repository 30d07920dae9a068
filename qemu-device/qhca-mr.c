/*
 * qhca: an emulated RDMA host channel adapter -- memory regions
 *
 * Memory by key: the regions' table and keys, the commands that register
 * and deregister them, fast registration (a kernel context's region that
 * its own send queue maps and invalidates), and every access the engines
 * make through a key: the checks (PD, rights, byte bounds), the
 * translations (page list, on-demand entries, or a physical region's DMA
 * addresses) and the copies between a message and a scatter/gather list.
 * Windows, which lend a region's memory to a key of their own, are in
 * qhca-mw.c.
 *
 * A key names at most one live region; a region's state lives only here
 * (its page list copied from guest memory at REG_MR, or from the fast
 * registration's list when the WQE runs), so the guest cannot change a
 * translation behind the device's back.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/bswap.h"
#include "qhca-rc.h"
#include "trace.h"

QEMU_BUILD_BUG_ON(QHCA_LIMIT_MAX_MR > UINT16_MAX);
QEMU_BUILD_BUG_ON(QHCA_MR_HASH_SIZE & (QHCA_MR_HASH_SIZE - 1));
QEMU_BUILD_BUG_ON(QHCA_MR_HASH_SIZE < 2 * QHCA_LIMIT_MAX_MR);
QEMU_BUILD_BUG_ON(sizeof(struct qhca_wqe_reg_mr) !=
                  QHCA_WQE_DATA_OFFSET - sizeof(struct qhca_wqe_ctrl));

/* ------------------------------------------------------------------------ */
/* the table: keys and names                                                */

/*
 * Keys come from a 31-bit sequence (1..2^31-1, the window flag clear), so a
 * value comes back only after 2^31 - 1 more registrations, and never while
 * a region has it; slots are table entries found through a hash, so keys
 * never run out.  A fast-registration region takes a whole block of 256
 * keys (its first, tag 0, is its name in the hash) and holds them all.
 */

/* The key a region is found by in s->mr_hash. */
static uint32_t qhca_mr_name(const QhcaMr *mr)
{
    return mr->fast ? mr->key & ~QHCA_KEY_TAG_MASK : mr->key;
}

/* Where name's probe sequence starts in s->mr_hash. */
static uint32_t qhca_mr_hash_home(uint32_t name)
{
    return (name * 0x9e3779b1u) >> (32 - ctz32(QHCA_MR_HASH_SIZE));
}

/* The s->mr_hash entry that holds name, or the empty one where it would go. */
static uint32_t qhca_mr_hash_find(QhcaState *s, uint32_t name)
{
    uint32_t i = qhca_mr_hash_home(name);

    while (s->mr_hash[i] && qhca_mr_name(&s->mr[s->mr_hash[i] - 1]) != name) {
        i = (i + 1) & (QHCA_MR_HASH_SIZE - 1);
    }
    return i;
}

/* The region named name, in any state. */
static QhcaMr *qhca_mr_by_name(QhcaState *s, uint32_t name)
{
    uint16_t e = s->mr_hash[qhca_mr_hash_find(s, name)];

    return e ? &s->mr[e - 1] : NULL;
}

/* The fast-registration region whose key is exactly key, in any state. */
static QhcaMr *qhca_mr_fast(QhcaState *s, uint32_t key)
{
    QhcaMr *mr = qhca_mr_by_name(s, key & ~QHCA_KEY_TAG_MASK);

    return mr && mr->fast && mr->key == key ? mr : NULL;
}

/*
 * The region an L_Key or R_Key names: a registered region by its key, a
 * fast-registration region by its exact key while it is valid.
 */
QhcaMr *qhca_mr_lookup(QhcaState *s, uint32_t key)
{
    QhcaMr *mr = qhca_mr_by_name(s, key);

    if (mr && !mr->fast) {
        return mr;
    }
    mr = qhca_mr_fast(s, key);
    return mr && mr->valid ? mr : NULL;
}

static void qhca_mr_hash_add(QhcaState *s, QhcaMr *mr)
{
    s->mr_hash[qhca_mr_hash_find(s, qhca_mr_name(mr))] = mr - s->mr + 1;
}

/* Removes mr's entry and shifts the ones probed past it back into place. */
static void qhca_mr_hash_del(QhcaState *s, QhcaMr *mr)
{
    const uint32_t mask = QHCA_MR_HASH_SIZE - 1;
    uint32_t hole = qhca_mr_hash_find(s, qhca_mr_name(mr)), j = hole;

    assert(s->mr_hash[hole] == mr - s->mr + 1);
    for (;;) {
        uint32_t home;

        j = (j + 1) & mask;
        if (!s->mr_hash[j]) {
            break;
        }
        home = qhca_mr_hash_home(qhca_mr_name(&s->mr[s->mr_hash[j] - 1]));
        /* It stays unless its home lies cyclically in (hole, j]. */
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            s->mr_hash[hole] = s->mr_hash[j];
            hole = j;
        }
    }
    s->mr_hash[hole] = 0;
}

/* No live region holds key: none has it, no fast one's block has it. */
static bool qhca_mr_key_free(QhcaState *s, uint32_t key)
{
    QhcaMr *block = qhca_mr_by_name(s, key & ~QHCA_KEY_TAG_MASK);

    return !qhca_mr_by_name(s, key) && !(block && block->fast);
}

/*
 * The next key of the sequence that no live region holds; for a fast
 * registration region, the next block of 256 free keys (its first: tag 0,
 * never key 0).  At most QHCA_LIMIT_MAX_MR are live, so this ends.
 */
static uint32_t qhca_mr_key_next(QhcaState *s, bool fast)
{
    for (;;) {
        uint32_t key = s->mr_key_seq % (QHCA_MW_KEY_FLAG - 1) + 1, i;
        bool taken = false;

        if (!fast) {
            s->mr_key_seq = key;
            if (qhca_mr_key_free(s, key)) {
                return key;
            }
            continue;
        }
        key = ROUND_UP(key, QHCA_KEY_TAG_MASK + 1);
        if (key >= QHCA_MW_KEY_FLAG) {
            key = QHCA_KEY_TAG_MASK + 1;
        }
        for (i = 0; i <= QHCA_KEY_TAG_MASK && !taken; i++) {
            taken = !qhca_mr_key_free(s, key + i);
        }
        s->mr_key_seq = key + QHCA_KEY_TAG_MASK;
        if (!taken) {
            return key;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* commands                                                                 */

/* A free slot, round-robin from mr_next; NULL when max_mr are live. */
static QhcaMr *qhca_mr_next_free(QhcaState *s)
{
    uint32_t n;

    for (n = 0; n < s->max_mr; n++) {
        QhcaMr *mr = &s->mr[(s->mr_next + n) % s->max_mr];

        if (!mr->in_use) {
            return mr;
        }
    }
    return NULL;
}

/*
 * A fast-registration region's REG_MR: a kernel context's, npages the most
 * it may map, nothing else given.  It holds its list of npages entries
 * (charged as a registered region's) from now on.
 */
static uint8_t qhca_mr_fast_check(QhcaState *s, uint32_t uar, uint32_t access,
                                  uint64_t iova, uint64_t length,
                                  uint32_t npages, uint64_t pages_addr)
{
    if (!qhca_uar_kernel(s, uar) || access != QHCA_ACCESS_FAST_REG ||
        iova || length || pages_addr || !npages ||
        npages > QHCA_FAST_REG_MAX_PAGES) {
        return QHCA_CMD_BAD_PARAM;
    }
    if (npages > QHCA_LIMIT_TOTAL_PAGES - s->total_pages) {
        return QHCA_CMD_NO_RESOURCES;
    }
    return QHCA_CMD_OK;
}

static uint8_t qhca_cmd_reg_mr(QhcaState *s, const struct qhca_cmd *cmd,
                               uint64_t *data, QhcaPageList *pl)
{
    struct qhca_cmd_reg_mr in;
    uint32_t uar, pdn, access, npages, i;
    uint64_t iova, length, pages_addr, want;
    QhcaPd *pd;
    QhcaMr *mr;
    uint8_t st;

    if (!qhca_cmd_unused_zero(cmd, false, 5)) {
        return QHCA_CMD_BAD_PARAM;
    }
    qhca_cmd_in_bytes(cmd, &in, sizeof(in));
    uar = le32_to_cpu(in.uar);
    pdn = le32_to_cpu(in.pdn);
    iova = le64_to_cpu(in.iova);
    length = le64_to_cpu(in.length);
    access = le32_to_cpu(in.access);
    npages = le32_to_cpu(in.npages);
    pages_addr = le64_to_cpu(in.pages_addr);

    if (!qhca_uar_valid(s, uar)) {
        return QHCA_CMD_BAD_RESOURCE;
    }
    pd = qhca_pd_lookup(s, pdn);
    if (!pd || pd->uar != uar) {
        return QHCA_CMD_BAD_RESOURCE;
    }
    if (access & ~(QHCA_ACCESS_ALL | QHCA_ACCESS_ON_DEMAND |
                   QHCA_ACCESS_MW_BIND | QHCA_ACCESS_PHYSICAL |
                   QHCA_ACCESS_FAST_REG)) {
        return QHCA_CMD_BAD_PARAM;
    }
    if ((access & QHCA_ACCESS_ON_DEMAND) && (access & QHCA_ACCESS_MW_BIND)) {
        /* Not in this version: windows need a pinned region. */
        return QHCA_CMD_BAD_PARAM;
    }
    if ((access & (QHCA_ACCESS_REMOTE_WRITE | QHCA_ACCESS_REMOTE_ATOMIC)) &&
        !(access & QHCA_ACCESS_LOCAL_WRITE)) {
        return QHCA_CMD_BAD_PARAM;
    }
    if (access & QHCA_ACCESS_FAST_REG) {
        st = qhca_mr_fast_check(s, uar, access, iova, length, npages,
                                pages_addr);
        if (st != QHCA_CMD_OK) {
            return st;
        }
    } else if (access & QHCA_ACCESS_PHYSICAL) {
        /*
         * A kernel context's: no page list, no translation, any range of
         * the DMA address space (iova 0, length UINT64_MAX: all of it).
         */
        if (!qhca_uar_kernel(s, uar) ||
            (access & (QHCA_ACCESS_ON_DEMAND | QHCA_ACCESS_MW_BIND)) ||
            npages || pages_addr || !length || iova + length - 1 < iova) {
            return QHCA_CMD_BAD_PARAM;
        }
    } else if (access & QHCA_ACCESS_ON_DEMAND) {
        /*
         * No page list; any range of the address space the implicit
         * region covers, the implicit region itself included.
         */
        if (npages || pages_addr || !length ||
            length > QHCA_ODP_IMPLICIT_LENGTH ||
            iova > QHCA_ODP_IMPLICIT_LENGTH - length) {
            return QHCA_CMD_BAD_PARAM;
        }
    } else {
        if (!length || length > QHCA_LIMIT_MAX_MR_SIZE ||
            iova + length - 1 < iova) {
            return QHCA_CMD_BAD_PARAM;
        }
        want = ((iova & (QHCA_PAGE_SIZE - 1)) + length + QHCA_PAGE_SIZE - 1)
               >> QHCA_PAGE_SHIFT;
        if (npages != want) {
            return QHCA_CMD_BAD_PARAM;
        }
    }
    mr = qhca_mr_next_free(s);
    if (!mr) {
        return QHCA_CMD_NO_RESOURCES;
    }
    if (access & QHCA_ACCESS_ON_DEMAND) {
        qhca_odp_mr_init(mr);
        access &= ~QHCA_ACCESS_ON_DEMAND;
    } else if (access & QHCA_ACCESS_PHYSICAL) {
        access &= ~QHCA_ACCESS_PHYSICAL;
        mr->phys = true;
    } else if (access & QHCA_ACCESS_FAST_REG) {
        /* Invalid, no rights: a REG_MR WQE gives it both. */
        access = 0;
        mr->fast = true;
        mr->valid = false;
        mr->pages = g_new(uint64_t, npages);
        for (i = 0; i < npages; i++) {
            mr->pages[i] = QHCA_PL_REVOKED;
        }
        s->total_pages += npages;
    } else if (!pl->pages) {
        return qhca_pl_request(s, pl, pages_addr, npages);
    } else {
        mr->pages = qhca_pl_take(pl);
    }
    mr->in_use = true;
    mr->key = qhca_mr_key_next(s, mr->fast);
    qhca_mr_hash_add(s, mr);
    mr->uar = uar;
    mr->pdn = pdn;
    mr->access = access;
    mr->iova = iova;
    mr->length = length;
    mr->npages = npages;
    mr->nr_mw = 0;
    pd->nr_mr++;
    s->num_mr++;
    s->mr_next = (mr - s->mr + 1) % s->max_mr;
    data[0] = mr->key;
    trace_qhca_obj("mr", mr->fast ? "alloc fast" : "reg", uar, data[0]);
    return QHCA_CMD_OK;
}

static void qhca_mr_free(QhcaState *s, QhcaMr *mr)
{
    trace_qhca_obj("mr", "dereg", mr->uar, mr->key);
    qhca_mr_hash_del(s, mr);
    s->pd[mr->pdn].nr_mr--;
    qhca_page_list_free(s, &mr->pages, &mr->npages);
    qhca_odp_mr_free(s, mr);
    mr->in_use = false;
    mr->phys = false;
    mr->fast = false;
    mr->valid = false;
    mr->key = 0;
    s->num_mr--;
}

/* FREE_UAR: the context's regions (its windows went first). */
void qhca_mr_free_ctx(QhcaState *s, uint32_t uar)
{
    uint32_t i;

    for (i = 0; i < QHCA_LIMIT_MAX_MR; i++) {
        if (s->mr[i].in_use && s->mr[i].uar == uar) {
            qhca_mr_free(s, &s->mr[i]);
        }
    }
}

/*
 * The region a command names (its key; a fast-registration region's first
 * key, in any state), if it belongs to the context uar.
 */
QhcaMr *qhca_cmd_mr(QhcaState *s, uint64_t uar, uint64_t key)
{
    QhcaMr *mr = key <= UINT32_MAX ? qhca_mr_by_name(s, key) : NULL;

    if (!mr || mr->uar != uar || !qhca_uar_valid(s, uar)) {
        return NULL;
    }
    return mr;
}

static uint8_t qhca_cmd_dereg_mr(QhcaState *s, const struct qhca_cmd *cmd)
{
    QhcaMr *mr;

    if (!qhca_cmd_unused_zero(cmd, false, 3) ||
        (cmd->in[2] & ~(uint64_t)QHCA_DEREG_MR_UNBIND_MWS)) {
        return QHCA_CMD_BAD_PARAM;
    }
    mr = qhca_cmd_mr(s, cmd->in[0], cmd->in[1]);
    if (!mr) {
        return QHCA_CMD_BAD_RESOURCE;
    }
    if (mr->nr_mw) {
        /* Windows are bound to it: unbound first, or first invalidated. */
        if (!(cmd->in[2] & QHCA_DEREG_MR_UNBIND_MWS)) {
            return QHCA_CMD_BAD_STATE;
        }
        qhca_mw_unbind_mr(s, mr);
    }
    qhca_mr_free(s, mr);
    return QHCA_CMD_OK;
}

/*
 * MODIFY_MR: a region's PD and rights change in place (its key, translation
 * and bounds stay); the next access through the key sees them, as after a
 * MODIFY_QP.  Regions with windows bound to them are not changed
 * (BAD_STATE); kernel regions (physical, fast registration) are not
 * changed by it at all.
 */
static uint8_t qhca_cmd_modify_mr(QhcaState *s, const struct qhca_cmd *cmd)
{
    uint64_t pdn = cmd->in[2], access = cmd->in[3];
    QhcaMr *mr;
    QhcaPd *pd;

    if (!qhca_cmd_unused_zero(cmd, false, 4)) {
        return QHCA_CMD_BAD_PARAM;
    }
    mr = qhca_cmd_mr(s, cmd->in[0], cmd->in[1]);
    if (!mr) {
        return QHCA_CMD_BAD_RESOURCE;
    }
    pd = pdn <= UINT32_MAX ? qhca_pd_lookup(s, pdn) : NULL;
    if (!pd || pd->uar != mr->uar) {
        return QHCA_CMD_BAD_RESOURCE;
    }
    if (mr->phys || mr->fast ||
        (access & ~(uint64_t)(QHCA_ACCESS_ALL | QHCA_ACCESS_MW_BIND)) ||
        ((access & (QHCA_ACCESS_REMOTE_WRITE | QHCA_ACCESS_REMOTE_ATOMIC)) &&
         !(access & QHCA_ACCESS_LOCAL_WRITE)) ||
        (mr->odp && (access & QHCA_ACCESS_MW_BIND))) {
        return QHCA_CMD_BAD_PARAM;
    }
    if (mr->nr_mw) {
        return QHCA_CMD_BAD_STATE;
    }
    s->pd[mr->pdn].nr_mr--;
    pd->nr_mr++;
    mr->pdn = pdn;
    mr->access = access;
    trace_qhca_obj("mr", "modify", mr->uar, mr->key);
    return QHCA_CMD_OK;
}

/*
 * REVOKE_PAGES: pages [first, first + count) of a pinned region's page list
 * are never reached again; an access that touches one fails as a DMA error
 * would.  The rest of the region works on.
 */
static uint8_t qhca_cmd_revoke_pages(QhcaState *s, const struct qhca_cmd *cmd)
{
    uint64_t first = cmd->in[2], count = cmd->in[3], i;
    QhcaMr *mr;

    if (!qhca_cmd_unused_zero(cmd, false, 4)) {
        return QHCA_CMD_BAD_PARAM;
    }
    mr = qhca_cmd_mr(s, cmd->in[0], cmd->in[1]);
    if (!mr) {
        return QHCA_CMD_BAD_RESOURCE;
    }
    if (mr->odp || mr->phys || mr->fast || !count || first >= mr->npages ||
        count > mr->npages - first) {
        return QHCA_CMD_BAD_PARAM;
    }
    for (i = 0; i < count; i++) {
        mr->pages[first + i] = QHCA_PL_REVOKED;
    }
    trace_qhca_obj("mr", "revoke", mr->uar, (uint32_t)cmd->in[1]);
    return QHCA_CMD_OK;
}

uint8_t qhca_cmd_mr_reg(QhcaState *s, const struct qhca_cmd *cmd,
                        uint64_t *data, QhcaPageList *pl)
{
    switch (cmd->opcode) {
    case QHCA_CMD_REG_MR:
        return qhca_cmd_reg_mr(s, cmd, data, pl);
    case QHCA_CMD_DEREG_MR:
        return qhca_cmd_dereg_mr(s, cmd);
    case QHCA_CMD_REVOKE_PAGES:
        return qhca_cmd_revoke_pages(s, cmd);
    case QHCA_CMD_MODIFY_MR:
        return qhca_cmd_modify_mr(s, cmd);
    default:
        return QHCA_CMD_BAD_OPCODE;
    }
}

/* ------------------------------------------------------------------------ */
/* fast registration: the send queue's REG_MR and invalidations             */

/*
 * REG_MR from qp's send queue (r in host order): a qhca_wc_status; on
 * error, *why says what and nothing has changed.
 */
uint8_t qhca_mr_fast_reg(QhcaState *s, QhcaQp *qp,
                         const struct qhca_wqe_reg_mr *r, const char **why)
{
    QhcaMr *mr = qhca_mr_by_name(s, r->key & ~QHCA_KEY_TAG_MASK);
    uint64_t list[QHCA_FAST_REG_MAX_PAGES];
    uint64_t npages;
    uint32_t i;

    if (!mr || !mr->fast || mr->pdn != qp->pdn) {
        *why = "fast registration: no such region in the QP's PD";
        return QHCA_WC_LOC_QP_OP_ERR;
    }
    if (mr->valid) {
        *why = "fast registration: the region is valid (invalidate it first)";
        return QHCA_WC_LOC_QP_OP_ERR;
    }
    if ((r->access & ~QHCA_ACCESS_ALL) ||
        ((r->access & (QHCA_ACCESS_REMOTE_WRITE | QHCA_ACCESS_REMOTE_ATOMIC)) &&
         !(r->access & QHCA_ACCESS_LOCAL_WRITE))) {
        *why = "fast registration: bad rights";
        return QHCA_WC_LOC_QP_OP_ERR;
    }
    if (!r->length || r->iova + r->length - 1 < r->iova ||
        r->length > (uint64_t)mr->npages << QHCA_PAGE_SHIFT) {
        *why = "fast registration: empty, wrapping or too long a range";
        return QHCA_WC_LOC_QP_OP_ERR;
    }
    npages = ((r->iova & (QHCA_PAGE_SIZE - 1)) + r->length +
              QHCA_PAGE_SIZE - 1) >> QHCA_PAGE_SHIFT;
    if (npages > mr->npages) {
        *why = "fast registration: more pages than the region can map";
        return QHCA_WC_LOC_QP_OP_ERR;
    }
    if (qhca_dma_read(s, r->pages_addr, list, npages * sizeof(list[0])) !=
        MEMTX_OK) {
        *why = "fast registration: the page list is unreachable";
        return QHCA_WC_LOC_QP_OP_ERR;
    }
    for (i = 0; i < npages; i++) {
        list[i] = le64_to_cpu(list[i]);
        if (list[i] & (QHCA_PAGE_SIZE - 1)) {
            *why = "fast registration: a page address is not page aligned";
            return QHCA_WC_LOC_QP_OP_ERR;
        }
    }
    memcpy(mr->pages, list, npages * sizeof(list[0]));
    for (i = npages; i < mr->npages; i++) {
        mr->pages[i] = QHCA_PL_REVOKED;
    }
    mr->key = r->key;
    mr->iova = r->iova;
    mr->length = r->length;
    mr->access = r->access;
    mr->valid = true;
    trace_qhca_obj("mr", "fast register", mr->uar, mr->key);
    return QHCA_WC_SUCCESS;
}

/*
 * LOCAL_INV of key from qp's send queue: a qhca_wc_status.  A window's key
 * is qhca-mw.c's; a region's must be a fast-registration region's exact
 * key, in the QP's PD.
 */
uint8_t qhca_local_inv(QhcaState *s, QhcaQp *qp, uint32_t key,
                       const char **why)
{
    QhcaMr *mr;

    if (key & QHCA_MW_KEY_FLAG) {
        return qhca_mw_local_inv(s, qp, key, why);
    }
    mr = qhca_mr_fast(s, key);
    if (!mr || mr->pdn != qp->pdn) {
        *why = "local invalidate: no fast-registration region of the QP's "
               "PD has that key";
        return QHCA_WC_LOC_QP_OP_ERR;
    }
    mr->valid = false;
    trace_qhca_obj("mr", "invalidate", mr->uar, key);
    return QHCA_WC_SUCCESS;
}

/*
 * SEND_WITH_INV landed on qp: false if key names nothing qp may invalidate
 * (a window as qhca-mw.c says, a fast-registration region of its PD).
 */
bool qhca_remote_inv(QhcaState *s, QhcaQp *qp, uint32_t key)
{
    QhcaMr *mr;

    if (key & QHCA_MW_KEY_FLAG) {
        return qhca_mw_remote_inv(s, qp, key);
    }
    mr = qhca_mr_fast(s, key);
    if (!mr || mr->pdn != qp->pdn) {
        return false;
    }
    mr->valid = false;
    trace_qhca_obj("mr", "remote invalidate", mr->uar, key);
    return true;
}

/* ------------------------------------------------------------------------ */
/* memory through page lists and keys                                       */

/* [off, off + len) of the buffer described by a page list. */
bool qhca_pl_rw(QhcaState *s, const uint64_t *pages, uint32_t npages,
                uint64_t off, void *buf, uint64_t len, bool write)
{
    uint8_t *p = buf;

    while (len) {
        uint64_t pg = off >> QHCA_PAGE_SHIFT;
        uint32_t in = off & (QHCA_PAGE_SIZE - 1);
        uint32_t n = MIN(len, QHCA_PAGE_SIZE - in);
        MemTxResult r;

        if (pg >= npages || pages[pg] == QHCA_PL_REVOKED) {
            return false;
        }
        r = write ? qhca_dma_write(s, pages[pg] + in, p, n)
                  : qhca_dma_read(s, pages[pg] + in, p, n);
        if (r != MEMTX_OK) {
            return false;
        }
        off += n;
        p += n;
        len -= n;
    }
    return true;
}

/*
 * The MR behind key, if it may be used by a QP of PD pdn for [va, va + len)
 * with the rights in access.  Byte granular: one byte outside fails.
 */
QhcaMr *qhca_mr_check(QhcaState *s, uint32_t key, uint32_t pdn,
                      uint64_t va, uint64_t len, uint32_t access)
{
    QhcaMr *mr = qhca_mr_lookup(s, key);

    if (!mr || mr->pdn != pdn || (mr->access & access) != access) {
        return NULL;
    }
    if (va < mr->iova || len > mr->length || va - mr->iova > mr->length - len) {
        return NULL;
    }
    return mr;
}

/*
 * [va, va + len) of a region that qhca_mr_check() accepted, through its
 * translation: a page list, on-demand entries, or none at all (a physical
 * region's addresses are the DMA addresses).
 */
QhcaMem qhca_mr_rw(QhcaState *s, QhcaMr *mr, uint64_t va, void *buf,
                   uint64_t len, bool write)
{
    if (mr->odp) {
        return qhca_odp_rw(s, mr, va, buf, len, write);
    }
    if (mr->phys) {
        return (write ? qhca_dma_write(s, va, buf, len)
                      : qhca_dma_read(s, va, buf, len)) == MEMTX_OK ?
               QHCA_MEM_OK : QHCA_MEM_ERROR;
    }
    return qhca_pl_rw(s, mr->pages, mr->npages,
                      (mr->iova & (QHCA_PAGE_SIZE - 1)) + (va - mr->iova),
                      buf, len, write) ? QHCA_MEM_OK : QHCA_MEM_ERROR;
}

/*
 * Whether [va, va + len) can be accessed without a page fault (pinned:
 * always); if not, s->fault says where.  For accesses that must not start
 * unless they can finish (atomics, READs before their first response).
 */
bool qhca_mr_ready(QhcaState *s, QhcaMr *mr, uint64_t va, uint64_t len,
                   bool write)
{
    return !mr->odp || qhca_odp_ready(s, mr, va, len, write);
}

/*
 * Copy between buf and bytes [off, off + len) of a message laid out over a
 * scatter/gather list.  Returns a qhca_wc_status, or QHCA_WC_ODP_FAULT
 * (s->fault says where; what was copied before it may be copied again).
 */
uint8_t qhca_sge_copy(QhcaState *s, uint32_t pdn,
                      const struct qhca_sge *sge, unsigned n,
                      uint64_t off, void *buf, uint64_t len,
                      bool to_mem)
{
    uint8_t *p = buf;
    unsigned i;

    for (i = 0; i < n && len; i++) {
        uint64_t chunk;
        QhcaMr *mr;

        if (off >= sge[i].length) {
            off -= sge[i].length;
            continue;
        }
        chunk = MIN(len, sge[i].length - off);
        mr = qhca_mr_check(s, sge[i].lkey, pdn, sge[i].addr + off, chunk,
                           to_mem ? QHCA_ACCESS_LOCAL_WRITE : 0);
        if (!mr) {
            return QHCA_WC_LOC_PROT_ERR;
        }
        switch (qhca_mr_rw(s, mr, sge[i].addr + off, p, chunk, to_mem)) {
        case QHCA_MEM_OK:
            break;
        case QHCA_MEM_FAULT:
            /* The driver may as well bring in the rest of the element. */
            s->fault.len = sge[i].addr + sge[i].length - s->fault.va;
            return QHCA_WC_ODP_FAULT;
        default:
            return QHCA_WC_LOC_ACCESS_ERR;
        }
        off = 0;
        p += chunk;
        len -= chunk;
    }
    return len ? QHCA_WC_LOC_LEN_ERR : QHCA_WC_SUCCESS;
}

/* Every non-empty SGE usable as a whole; the sum of their lengths. */
uint8_t qhca_sge_check(QhcaState *s, uint32_t pdn,
                       const struct qhca_sge *sge, unsigned n,
                       bool to_mem, uint64_t *total)
{
    unsigned i;

    *total = 0;
    for (i = 0; i < n; i++) {
        if (!sge[i].length) {
            continue;
        }
        if (!qhca_mr_check(s, sge[i].lkey, pdn, sge[i].addr, sge[i].length,
                           to_mem ? QHCA_ACCESS_LOCAL_WRITE : 0)) {
            return QHCA_WC_LOC_PROT_ERR;
        }
        *total += sge[i].length;
    }
    return *total > QHCA_MAX_MSG_SIZE ? QHCA_WC_LOC_LEN_ERR : QHCA_WC_SUCCESS;
}

/*
 * Whether the first len bytes of a scatter list (every SGE checked by
 * qhca_sge_check() for writing) can be written without a page fault:
 * QHCA_WC_SUCCESS, QHCA_WC_ODP_FAULT or QHCA_WC_LOC_PROT_ERR.
 */
uint8_t qhca_sge_ready(QhcaState *s, uint32_t pdn,
                       const struct qhca_sge *sge, unsigned n, uint64_t len)
{
    unsigned i;

    for (i = 0; i < n && len; i++) {
        uint64_t chunk = MIN(len, sge[i].length);
        QhcaMr *mr;

        if (!chunk) {
            continue;
        }
        mr = qhca_mr_check(s, sge[i].lkey, pdn, sge[i].addr, chunk,
                           QHCA_ACCESS_LOCAL_WRITE);
        if (!mr) {
            return QHCA_WC_LOC_PROT_ERR;
        }
        if (!qhca_mr_ready(s, mr, sge[i].addr, chunk, true)) {
            return QHCA_WC_ODP_FAULT;
        }
        len -= chunk;
    }
    return QHCA_WC_SUCCESS;
}

