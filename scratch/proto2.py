import numpy as np, scipy.sparse as sp, time, logging
from topdown.estimation.family import FamilyTask, _l2
from topdown.estimation.passes import EstimateOptions, SolverChoice
shape=(3,4,5)
ax=np.indices(shape).reshape(3,-1); n=ax.shape[1]
GROUPS=[ax[0]*4+ax[1], ax[1]*5+ax[2], ax[0], np.zeros(n,dtype=np.int64)]
def fam(seed,k):
    rng=np.random.default_rng(seed)
    xt=rng.integers(0,6,(k,n))*(rng.random((k,n))<0.5)
    p=xt.sum(0); 
    y=xt+rng.normal(0,2.0,(k,n)); w=rng.uniform(0.5,2,k)
    ms=[]
    for g in GROUPS:
        z=np.stack([np.bincount(g,xt[c],minlength=g.max()+1) for c in range(k)])+rng.normal(0,1.5,(k,g.max()+1))
        ms.append((g,z,rng.uniform(0.5,2,k)))
    return y,p.astype(float),w,ms
def run(y,p,w,ms,root,solver):
    k=y.shape[0]
    sup=np.flatnonzero(p>0) if not root else np.arange(n)
    meas=[(sp.identity(len(sup),format='csr'),y[:,sup],np.repeat(w[:,None],len(sup),1))]
    for g,z,v in ms:
        Q=sp.csr_matrix((np.ones(n),(g,np.arange(n))),shape=(g.max()+1,n))[:,sup].tocsr()
        meas.append((Q,z,np.repeat(v[:,None],z.shape[1],1)))
    t=FamilyTask(level=0 if root else 1,parent_label=None if root else 'p',child_labels=tuple(f'c{c}' for c in range(k)),
        parent_values=None if root else p[sup],measurements=tuple(meas),support=sup,first_pass=(1,2,3),
        options=EstimateOptions(solver=SolverChoice(solver)))
    x,st=_l2(t,None if root else p[sup]); out=np.zeros((k,n)); out[:,sup]=x; return out, st.solved_in('l2')
for seed in range(3):
    y,p,w,ms=fam(seed,3)
    a,sa=run(y,p,w,ms,False,'auto'); b,sb=run(y,p,w,ms,False,'cvxpy:CLARABEL')
    print(seed,sa,sb,np.abs(a-b).max())
    a,sa=run(y[:1],None,w[:1],[(g,z[:1],v[:1]) for g,z,v in ms],True,'auto'); b,sb=run(y[:1],None,w[:1],[(g,z[:1],v[:1]) for g,z,v in ms],True,'cvxpy:CLARABEL')
    print(seed,sa,sb,np.abs(a-b).max())
