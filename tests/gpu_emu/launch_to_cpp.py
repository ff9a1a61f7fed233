# launch_to_cpp.py — tests/gpu_emu: rewrites a .cu file's kernel launches
#   kernel<<<grid, block, smem, stream>>>(a, b);
#     ->  emu_launch(dim3(grid), dim3(block), [emu_a0 = (a), emu_a1 = (b)] { kernel(emu_a0, emu_a1); });
#   (each argument evaluated at the launch and kept by value, as CUDA does: a launch recorded
#   while a stream captures runs after its caller returned, when an argument such as s->T would
#   read a dead struct)
# so the unchanged CUDA sources compile as C++ against the emulation shim.
# Usage: launch_to_cpp.py in.cu out.cpp
import re, sys
def split_top(s, nest='([{'):
    """The comma-separated parts of s at the top level: the characters of nest open a level,
    their partners close it. A call's arguments nest brackets only (`a < b` is no bracket); the
    launch configuration also nests <> (template arguments)."""
    close={'(':')','[':']','{':'}','<':'>'}
    closers=''.join(close[c] for c in nest)
    parts=[]; depth=0; cur=''
    for ch in s:
        if ch in nest: depth+=1
        if ch in closers: depth-=1
        if ch==',' and depth==0: parts.append(cur); cur=''
        else: cur+=ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]
src=open(sys.argv[1]).read()
out=''; i=0
pat=re.compile(r'([A-Za-z_]\w*(?:<[^<>;]*>)?)<<<')
while True:
    m=pat.search(src,i)
    if not m: out+=src[i:]; break
    out+=src[i:m.start()]
    name=m.group(1)
    j=src.index('>>>',m.end())
    cfg=split_top(src[m.end():j], '([{<')
    k=j+3
    assert src[k]=='('
    depth=0; e=k
    while True:
        if src[e]=='(': depth+=1
        elif src[e]==')':
            depth-=1
            if depth==0: break
        e+=1
    args=split_top(src[k+1:e])
    if any('__VA_ARGS__' in a for a in args):
        # a launch inside a macro: its arguments are the macro's, unknown here, so the variables
        # they name are captured by value ([=]); such a macro must be handed values, not s->T
        out+=f'emu_launch(dim3({cfg[0]}), dim3({cfg[1]}), [=] {{ {name}({src[k+1:e]}); }})'
    else:
        caps=', '.join(f'emu_a{n} = ({a})' for n,a in enumerate(args))
        call=', '.join(f'emu_a{n}' for n in range(len(args)))
        out+=f'emu_launch(dim3({cfg[0]}), dim3({cfg[1]}), [{caps}] {{ {name}({call}); }})'
    i=e+1
open(sys.argv[2],'w').write(out)
