import sys; sys.path.insert(0, "tests")
import numpy as np, cuflash
from helpers import make_inputs
from cuflash.oracle import oracle_backward, oracle_attention, rel_error
from test_variants import variants, LEAD
f32=np.float32
def fma(a,b,c): return (a.astype(np.float64)*b.astype(np.float64)+c.astype(np.float64)).astype(f32)
T,S,d=97,131,64
kw=variants(np,T,S)["softcap30"]; c=f32(30.0); scale=f32(4.0)
LOG2E=f32(1.4426950408889634); LN2=f32(0.6931471805599453)
for seed in range(4):
    q,k,v=make_inputs(np, LEAD+(T,d), LEAD+(S,d), np.float32, seed=seed)
    do=make_inputs(np, LEAD+(T,d), LEAD+(1,d), np.float32, seed=seed+1)[0]
    x=(q@np.swapaxes(k,-1,-2)).astype(f32)
    mul=f32(c*LOG2E); cap_in=f32(scale/c)
    u=np.tanh((x*cap_in).astype(f32)).astype(f32)
    m=u.max(-1,keepdims=True)
    p=np.exp2(fma(u,np.broadcast_to(mul,u.shape),-(m*mul).astype(f32))).astype(f32)
    l=p.sum(-1,keepdims=True,dtype=f32)
    lse=((fma(m,np.broadcast_to(mul,m.shape),np.log2(l).astype(f32)))*LN2).astype(f32)
    out=((p@v).astype(f32)/l).astype(f32)
    # backward
    D=(do*out).sum(-1,keepdims=True,dtype=f32)
    lse2=(lse*LOG2E).astype(f32)
    P=np.exp2(fma(u,np.broadcast_to(mul,u.shape),-np.broadcast_to(lse2,u.shape))).astype(f32)
    g=(f32(1)-u*u).astype(f32)
    dP=(do@np.swapaxes(v,-1,-2)).astype(f32)
    dS=(P*(dP-D)*g).astype(f32)
    dq=((dS@k).astype(f32)*scale).astype(f32)
    refs=oracle_backward(do,q,k,v,**kw)
    ro,rl=oracle_attention(q,k,v,**kw)
    nv=cuflash.naive_attention_backward(do,q,k,v,**kw)
    print(seed,"emu dq %.3e naive %.3e | lse abs err max %.2e" % (rel_error(dq,refs[0]), rel_error(nv[0],refs[0]), np.abs(lse[...,0]-rl).max()))
    # (c) natural units: P = 2^(fma(u, c, -lse) * log2 e): lse rounded once (its float32 storage)
    Pc=np.exp2((fma(u,np.broadcast_to(c,u.shape),-np.broadcast_to(lse,u.shape))*LOG2E).astype(f32)).astype(f32)
    dqc=(((Pc*(dP-D)*g).astype(f32)@k).astype(f32)*scale)
    # (a) m and l kept apart: P = 2^((u - m)·mul) / l
    Pa=(np.exp2(((u-m).astype(f32)*mul).astype(f32))/l).astype(f32)
    dqa=(((Pa*(dP-D)*g).astype(f32)@k).astype(f32)*scale)
    print("   (c) natural units %.3e   (a) m, l apart %.3e" % (rel_error(dqc,refs[0]), rel_error(dqa,refs[0])))
    if seed==0:
        # with exact lse (float64 lse2 rounding only once)
        lse2x=(rl[...,None]*np.float64(1.4426950408889634)).astype(f32)
        P2=np.exp2(fma(u,np.broadcast_to(mul,u.shape),-np.broadcast_to(lse2x,u.shape))).astype(f32)
        dq2=(((P2*(dP-D)*g).astype(f32)@k).astype(f32)*scale)
        print("   with oracle lse: %.3e" % rel_error(dq2,refs[0]))
