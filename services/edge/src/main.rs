//! `seckill-edge`: the shared service skeleton around the edge.

// Every request allocates a little (the order record, its id, the response);
// mimalloc's thread-local free lists beat glibc's arenas at that.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    seckill_shared::ops::host::run::<seckill_edge::Application>()
}
