# launch_to_cpp.py — tests/gpu_emu: rewrites a .cu file's kernel launches
#   kernel<<<grid, block, smem, stream>>>(args);  ->  emu_launch(dim3(grid), dim3(block), [=] { kernel(args); });
#   (the arguments by value: a launch recorded while a stream captures runs after its caller returned)
# so the unchanged CUDA sources compile as C++ against the emulation shim.
# Usage: launch_to_cpp.py in.cu out.cpp
import re, sys
def split_top(s):
    parts=[]; depth=0; cur=''
    for ch in s:
        if ch in '([{<': depth+=1
        if ch in ')]}>': depth-=1
        if ch==',' and depth==0: parts.append(cur); cur=''
        else: cur+=ch
    parts.append(cur); return [p.strip() for p in parts]
src=open(sys.argv[1]).read()
out=''; i=0
pat=re.compile(r'([A-Za-z_]\w*(?:<[^<>;]*>)?)<<<')
while True:
    m=pat.search(src,i)
    if not m: out+=src[i:]; break
    out+=src[i:m.start()]
    name=m.group(1)
    j=src.index('>>>',m.end())
    cfg=split_top(src[m.end():j])
    k=j+3
    assert src[k]=='('
    depth=0; e=k
    while True:
        if src[e]=='(': depth+=1
        elif src[e]==')':
            depth-=1
            if depth==0: break
        e+=1
    args=src[k+1:e]
    out+=f'emu_launch(dim3({cfg[0]}), dim3({cfg[1]}), [=] {{ {name}({args}); }})'
    i=e+1
open(sys.argv[2],'w').write(out)
