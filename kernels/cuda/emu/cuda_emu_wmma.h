// The emulator's nvcuda::wmma (CUDA's warp matrix API, <mma.h>): the 16 x 16 x 16 shape with bf16 A/B fragments and
// fp32 accumulators, the subset cvmm's tensor-core kernel uses (kernels/cuda/cuda_cvmm_mma.cu). Included by
// cuda_emu.h.
//
// Semantics, as CUDA documents them: load_matrix_sync, mma_sync and store_matrix_sync are collective over the warp:
// every lane must reach them (each is a full-warp barrier here, so a missing lane is reported like a __syncwarp
// after an exit, and lanes waiting at different collectives as a deadlock), and every lane must pass the same mptr,
// ldm and layout (checked: a lane that passes others than lane 0 is reported); mptr must be 256-bit aligned and ldm a
// multiple of 8 bf16 or 4 float elements (checked). A load is not a memory fence: each lane reads the tile as it
// arrives, before the warp meets, so what other lanes stored just before (a store_matrix_sync's elements included) is
// seen only after a __syncwarp or __syncthreads, as the GPU's memory model promises no more; a missing one gives
// stale values here, which the op harness then reports against the CPU. mma_sync: D = A B + C with the bf16 products exact and each
// element's 16 products and C summed in double and rounded once to fp32 (the tensor core's internal order and
// rounding within one mma are unspecified; the emulated cuBLAS sums in double too). Fault injection for auto's probe of
// the tensor-core kernels: CUDA_EMU_WMMA=wrong adds 1 to D[0, 0] of every mma_sync.
//
// Representation: each lane's fragment holds the whole 16 x 16 tile. The element mapping to lanes is unspecified in
// CUDA, so the emulator picks one: element (i, j) belongs to lane (16 i + j) % 32; mma_sync computes, and
// store_matrix_sync writes, only the calling lane's own elements, so the warp computes each element once and a
// result is complete only once every lane has stored (read it from another lane after a __syncwarp or
// __syncthreads, as on the GPU). Per-element access (x[], num_elements) is not emulated.
#ifndef KERNELS_CUDA_EMU_CUDA_EMU_WMMA_H
#define KERNELS_CUDA_EMU_CUDA_EMU_WMMA_H

namespace emu {
unsigned lane_id(void); // the calling thread's lane in its warp (its linear index in the block % 32)
bool wmma_fault(void);  // CUDA_EMU_WMMA=wrong: every mma_sync adds 1 to D[0, 0] (a faulty tensor-core kernel's probe)
}

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int m, int n, int k, class T, class Layout = void> struct fragment {
    static_assert(m == 16 && n == 16 && k == 16, "the emulator's wmma has the 16 x 16 x 16 shape only");
    static_assert(std::is_same_v<Use, accumulator> ? std::is_same_v<T, float> : std::is_same_v<T, __nv_bfloat16>,
                  "the emulator's wmma has bf16 A/B fragments and fp32 accumulators only");
    float tile[16 * 16]; // row-major (i, j) of the 16 x 16 tile, as values (a bf16 is exact in a float)
};

namespace detail {
inline void check_pointer(const char *what, const void *mptr, unsigned ldm, unsigned elem_bytes) {
    if ((uintptr_t)mptr % 32 != 0) emu::fatal("wmma::%s: pointer %p is not 256-bit aligned", what, mptr);
    if (ldm * elem_bytes % 16 != 0)
        emu::fatal("wmma::%s: ldm %u is not a multiple of 16 bytes (%u-byte elements)", what, ldm, elem_bytes);
}
inline bool owns(int i, int j) { return (unsigned)(16 * i + j) % 32 == emu::lane_id(); }
// The warp meets (a full-warp barrier) and every lane checks that it passed lane 0's arguments.
inline void converge(const char *what, const void *mptr, unsigned ldm, unsigned layout) {
    const uint64_t key = ((uint64_t)(uintptr_t)mptr * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)ldm << 2) ^ layout;
    const unsigned lane = emu::lane_id();
    if (emu::warp_exchange(0xffffffffu, key, (int)lane) != key) // src_lane_xor = lane: lane 0's value
        emu::fatal("wmma::%s: lane %u passes another pointer, ldm or layout than lane 0 (%p, ldm %u): every lane of "
                   "the warp must pass the same", what, lane, mptr, ldm);
}
// element (i, j) of a 16 x 16 matrix at mptr with leading dimension ldm, row- or column-major in memory
inline size_t at(int i, int j, unsigned ldm, bool row_major) {
    return row_major ? (size_t)i * ldm + (size_t)j : (size_t)j * ldm + (size_t)i;
}
} // namespace detail

template <class Use, class T, class Layout, class V> inline void fill_fragment(fragment<Use, 16, 16, 16, T, Layout> &f,
                                                                              const V &v) {
    float value;
    if constexpr (std::is_same_v<V, __nv_bfloat16>) value = __bfloat162float(v);
    else value = (float)v;
    // A bf16 fragment holds bf16 values: CUDA converts the fill value to the fragment's type (round to nearest).
    if constexpr (std::is_same_v<T, __nv_bfloat16>) value = __bfloat162float(__float2bfloat16_rn(value));
    for (float &x : f.tile) x = value;
}

template <class Use, class Layout>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, __nv_bfloat16, Layout> &f, const __nv_bfloat16 *mptr,
                             unsigned ldm) {
    static_assert(!std::is_same_v<Use, accumulator>, "an accumulator load names its memory layout");
    detail::check_pointer("load_matrix_sync", mptr, ldm, sizeof(__nv_bfloat16));
    const bool row = std::is_same_v<Layout, row_major>;
    for (int i = 0; i < 16; i++) // as this lane arrives (no fence: see above)
        for (int j = 0; j < 16; j++) f.tile[i * 16 + j] = __bfloat162float(mptr[detail::at(i, j, ldm, row)]);
    detail::converge("load_matrix_sync", mptr, ldm, row ? 0 : 1);
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *mptr, unsigned ldm,
                             layout_t layout) {
    detail::check_pointer("load_matrix_sync", mptr, ldm, sizeof(float));
    for (int i = 0; i < 16; i++) // as this lane arrives (no fence: see above)
        for (int j = 0; j < 16; j++) f.tile[i * 16 + j] = mptr[detail::at(i, j, ldm, layout == mem_row_major)];
    detail::converge("load_matrix_sync", mptr, ldm, layout == mem_row_major ? 0 : 1);
}

inline void store_matrix_sync(float *mptr, const fragment<accumulator, 16, 16, 16, float> &f, unsigned ldm,
                              layout_t layout) {
    detail::converge("store_matrix_sync", mptr, ldm, layout == mem_row_major ? 0 : 1);
    detail::check_pointer("store_matrix_sync", mptr, ldm, sizeof(float));
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++)
            if (detail::owns(i, j)) mptr[detail::at(i, j, ldm, layout == mem_row_major)] = f.tile[i * 16 + j];
}

template <class LayoutA, class LayoutB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                     const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LayoutA> &a,
                     const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LayoutB> &b,
                     const fragment<accumulator, 16, 16, 16, float> &c) {
    emu::warp_barrier(0xffffffffu);
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            if (!detail::owns(i, j)) continue;
            double s = c.tile[i * 16 + j];
            for (int k = 0; k < 16; k++) s += (double)a.tile[i * 16 + k] * b.tile[k * 16 + j];
            d.tile[i * 16 + j] = (float)s;
        }
    if (detail::owns(0, 0) && emu::wmma_fault()) d.tile[0] += 1.0f; // read at every call: tests switch it per backend
}

} // namespace wmma
} // namespace nvcuda

#endif
