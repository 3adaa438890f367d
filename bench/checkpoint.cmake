# bench_checkpoint: training stall per checkpoint, sync vs async, and write throughput next to a
# plain sequential write of the same bytes.
add_executable(bench_checkpoint bench_checkpoint.c)
target_link_libraries(bench_checkpoint PRIVATE onebit)
