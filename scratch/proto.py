import numpy as np, scipy.sparse as sp, time, logging
from topdown.estimation.multipass_newton import ChunkFitter, RootFitter, two_passes
from topdown.estimation.family import FamilyTask, _l2
from topdown.estimation.passes import EstimateOptions, SolverChoice
logging.basicConfig(level=logging.WARNING, format="%(name)s %(message)s")
logging.getLogger("topdown.estimation.multipass_newton").setLevel(logging.DEBUG)
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
def general(y,p,w,ms,root):
    k=y.shape[0]
    sup=np.flatnonzero(p>0) if not root else np.arange(n)
    meas=[(sp.identity(len(sup),format='csr'),y[:,sup],np.repeat(w[:,None],len(sup),1))]
    for g,z,v in ms:
        Q=sp.csr_matrix((np.ones(n),(g,np.arange(n))),shape=(g.max()+1,n))[:,sup].tocsr()
        meas.append((Q,z,np.repeat(v[:,None],z.shape[1],1)))
    t=FamilyTask(level=0 if root else 1,parent_label=None if root else 'p',child_labels=tuple(f'c{c}' for c in range(k)),
        parent_values=None if root else p[sup],measurements=tuple(meas),support=sup,first_pass=tuple(range(1,len(ms)+1)),
        options=EstimateOptions(solver=SolverChoice('cvxpy:CLARABEL')))
    x,st=_l2(t,None if root else p[sup]); out=np.zeros((k,n)); out[:,sup]=x; return out
for seed in range(4):
    k=3
    y,p,w,ms=fam(seed,k)
    # chunk of one (support = all cells with p>0)
    sup=np.flatnonzero(p>0); W=len(sup)
    from topdown.estimation.family_newton import _chunk_marginal
    cm=[_chunk_marginal(g[sup],z,v) for g,z,v in ms]
    f=ChunkFitter(tuple(m.groups for m in cm),tuple(m.targets.shape[2] for m in cm),p[sup][None])
    t0=time.process_time()
    r=two_passes(f,y[None][:,:,sup],w[None],[(m.targets,m.weights) for m in cm])
    t1=time.process_time()
    ref=general(y,p,w,ms,False)
    print('family',seed,r.settled,r.prox_steps,r.hold_rounds,'maxdiff',np.abs(r.x[0]-ref[:,sup]).max(),'cpu',t1-t0, time.process_time()-t1)
    # root
    y0=y[0]; ms0=[(g,z[:1],v[:1]) for g,z,v in ms]
    f=RootFitter(tuple(g for g,_,_ in ms0))
    r=two_passes(f,y0,np.array(w[0]),[(z[0],np.array(v[0])) for g,z,v in ms0])
    ref=general(y0[None],None,w[:1],ms0,True)
    print('root',seed,r.settled,r.prox_steps,r.hold_rounds,'maxdiff',np.abs(r.x-ref[0]).max())
