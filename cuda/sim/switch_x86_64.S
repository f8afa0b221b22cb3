// cuda/sim/switch_x86_64.S — the fiber context switch of the CUDA emulator.
//
//   void cudasim_switch(void** save_sp, void* load_sp);
//
// Pushes the callee-saved registers of the System V x86-64 ABI (rbp, rbx,
// r12-r15) on the current stack, stores rsp in *save_sp, loads load_sp and
// pops the same registers from the other stack. MXCSR and the x87 control
// word are not saved: kernels do not change them, and skipping them makes a
// switch about a quarter faster.
//
// A new fiber's stack is prepared by cuda/sim/scheduler.cpp as
//   [sp+0..40] r15 r14 r13 r12 rbx rbp   (r12 = the Fiber*, rbp = 0)
//   [sp+48]    cudasim_fiber_entry
// so the first switch to it "returns" into cudasim_fiber_entry, which calls
// cudasim_fiber_main(Fiber*) with a 16-byte aligned stack. That function
// never returns.
#if defined(__x86_64__) && defined(__ELF__)

        .text
        .globl  cudasim_switch
        .hidden cudasim_switch
        .type   cudasim_switch, @function
        .p2align 4
cudasim_switch:
        .cfi_startproc
        pushq   %rbp
        pushq   %rbx
        pushq   %r12
        pushq   %r13
        pushq   %r14
        pushq   %r15
        movq    %rsp, (%rdi)
        movq    %rsi, %rsp
        popq    %r15
        popq    %r14
        popq    %r13
        popq    %r12
        popq    %rbx
        popq    %rbp
        ret
        .cfi_endproc
        .size   cudasim_switch, .-cudasim_switch

        .globl  cudasim_fiber_entry
        .hidden cudasim_fiber_entry
        .type   cudasim_fiber_entry, @function
        .p2align 4
cudasim_fiber_entry:
        .cfi_startproc
        .cfi_undefined rip          // outermost frame: unwinders stop here
        xorl    %ebp, %ebp
        movq    %r12, %rdi
        call    cudasim_fiber_main@PLT
        ud2
        .cfi_endproc
        .size   cudasim_fiber_entry, .-cudasim_fiber_entry

#endif

        .section .note.GNU-stack,"",@progbits
