# cmake -DIN=file -DOUT=file.c -DVAR=name -DHEADER=header.h -P embed.cmake: the bytes of IN as
# `const unsigned char VAR[]` and `const size_t VAR_len`, declared in HEADER. Used for the
# descriptor set of the protos (onebit/protoset.h) and the REST API's OpenAPI document
# (service/src/openapi.h).
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" n)
math(EXPR len "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){16})" "\\1\n    " bytes "${bytes}")
get_filename_component(name ${IN} NAME)
file(WRITE ${OUT}
     "/* Generated from ${name} by cmake/embed.cmake; do not edit. */\n"
     "#include \"${HEADER}\"\n\n"
     "const unsigned char ${VAR}[] = {\n    ${bytes}\n};\n"
     "const size_t ${VAR}_len = ${len};\n")
