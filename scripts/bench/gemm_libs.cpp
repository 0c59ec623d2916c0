// Chooses the CPU GEMM library by measurement: OpenBLAS cblas_sgemm vs oneDNN dnnl_sgemm on the matrix shapes
// of the shipped models (batch 128 MLP layers, GPT projections, conv im2col products). Best of 7 runs each.
// Build and run: scripts/bench/gemm_libs.sh
#include <cblas.h>
#include <dnnl.h>
#include <chrono>
#include <cstdio>
#include <vector>
#include <algorithm>
int main(){
  struct S{int m,n,k;}; S shapes[]={{128,512,784},{128,1024,1024},{128,784,512},{2048,512,128},{2048,128,512},{576*64,32,25},{64*64,64,800}};
  for(auto s:shapes){
    std::vector<float> a((size_t)s.m*s.k,1.f),b((size_t)s.k*s.n,0.5f),c((size_t)s.m*s.n);
    double t1=1e9,t2=1e9;
    for(int r=0;r<7;r++){
      auto t=std::chrono::steady_clock::now();
      cblas_sgemm(CblasRowMajor,CblasNoTrans,CblasTrans,s.m,s.n,s.k,1,a.data(),s.k,b.data(),s.k,0,c.data(),s.n);
      t1=std::min(t1,std::chrono::duration<double>(std::chrono::steady_clock::now()-t).count());
      t=std::chrono::steady_clock::now();
      dnnl_sgemm('N','T',s.m,s.n,s.k,1,a.data(),s.k,b.data(),s.k,0,c.data(),s.n);
      t2=std::min(t2,std::chrono::duration<double>(std::chrono::steady_clock::now()-t).count());
    }
    double f=2.0*s.m*s.n*s.k;
    printf("m=%d n=%d k=%d  openblas %.1f GF/s  onednn %.1f GF/s\n",s.m,s.n,s.k,f/t1/1e9,f/t2/1e9);
  }
}
