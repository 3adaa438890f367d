# bench_checkpoint: training stall per checkpoint, sync vs async, and write throughput next to a
# plain sequential write of the same bytes.
add_executable(bench_checkpoint bench_checkpoint.c)
target_link_libraries(bench_checkpoint PRIVATE onebit)
# bench_checkpoint_write: a whole job's checkpoint (every rank writing at once, under mpirun)
# against a plain sequential write of the same bytes, alternated in one run.
add_executable(bench_checkpoint_write bench_checkpoint_write.c)
target_link_libraries(bench_checkpoint_write PRIVATE onebit MPI::MPI_C)
