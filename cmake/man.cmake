# Man pages, made by the programs themselves at build time (nothing generated is committed):
# onebitctl(1) and onebitd(8) from their option tables (--man), onebit-worker(1) and
# onebit-ckpt(1) from their --help (cmake/man_page.cmake). Written to ${CMAKE_BINARY_DIR}/man,
# installed to share/man by cmake --install. ONEBIT_MAN=OFF skips them (a cross build, say,
# whose programs cannot run here).
option(ONEBIT_MAN "Make the man pages at build time (runs the built programs)" ON)
if(NOT ONEBIT_MAN)
  return()
endif()

set(OB_MAN_DIR ${CMAKE_BINARY_DIR}/man)
set(OB_MAN_PAGES "")
# ob_man_page(TARGET SECTION MODE [SUMMARY]): TARGET's page, from --man or --help (MODE).
function(ob_man_page target section mode)
  set(out ${OB_MAN_DIR}/${target}.${section})
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -DMODE=${mode} -DEXE=$<TARGET_FILE:${target}> -DNAME=${target}
            -DSECTION=${section} "-DSUMMARY=${ARGN}" -DVERSION=${PROJECT_VERSION} -DOUT=${out}
            -P ${PROJECT_SOURCE_DIR}/cmake/man_page.cmake
    DEPENDS ${target} ${PROJECT_SOURCE_DIR}/cmake/man_page.cmake
    COMMENT "Man page ${target}(${section})"
    VERBATIM)
  install(FILES ${out} DESTINATION share/man/man${section})
  set(OB_MAN_PAGES ${OB_MAN_PAGES} ${out} PARENT_SCOPE)
endfunction()

file(MAKE_DIRECTORY ${OB_MAN_DIR})
ob_man_page(onebitctl 1 man)
ob_man_page(onebitd 8 man)
ob_man_page(onebit-worker 1 help "one rank of a onebit training job (started by onebitd under mpirun)")
ob_man_page(onebit-ckpt 1 help "look into onebit checkpoints without training")
add_custom_target(man ALL DEPENDS ${OB_MAN_PAGES})
