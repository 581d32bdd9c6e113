/* SPDX-License-Identifier: MIT */
/* atfork_lib.h - what atfork_lib.c tells the test program (atfork_program.c). */
#ifndef ATFORK_LIB_H
#define ATFORK_LIB_H

/* pthread_atfork's answer in the constructor; -2: it returned 0 but changed errno */
int atfork_lib_registered(void);
unsigned long atfork_lib_prepared(void); /* how often prepare ran in this process */
unsigned long atfork_lib_parented(void); /* how often parent ran in this process */
int atfork_lib_in_child(void);           /* whether the child handler ran (we are a child) */
void *atfork_lib_child_block(void);      /* the child handler's block; the caller frees it */
int atfork_lib_shape(void);              /* ATFORK_SHAPE */

#endif
