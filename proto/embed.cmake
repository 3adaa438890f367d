# cmake -DIN=file -DOUT=file.c -P embed.cmake: the bytes of IN as the C array ob_protoset
# (onebit/protoset.h).
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" n)
math(EXPR len "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){16})" "\\1\n    " bytes "${bytes}")
file(WRITE ${OUT}
     "/* Generated from onebit.protoset by proto/embed.cmake; do not edit. */\n"
     "#include \"onebit/protoset.h\"\n\n"
     "const unsigned char ob_protoset[] = {\n    ${bytes}\n};\n"
     "const size_t ob_protoset_len = ${len};\n")
