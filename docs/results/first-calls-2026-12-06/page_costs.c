#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <unistd.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  size_t n=64<<20, np=n/4096;
  for(int k=0;k<3;k++){
  int fd=memfd_create("x",0); ftruncate(fd,n);
  double t0=now(); posix_fallocate(fd,0,n); double t1=now();
  char*p=mmap(0,n,PROT_READ|PROT_WRITE,MAP_SHARED,fd,0);
  double t2=now(); memset(p,1,n); double t3=now();
  char*q=mmap(0,n,PROT_READ|PROT_WRITE,MAP_SHARED,fd,0);
  double t5=now(); volatile long s=0; for(size_t i=0;i<n;i+=4096) s+=q[i]; double t6=now();
  char*r=mmap(0,n,PROT_READ|PROT_WRITE,MAP_SHARED,fd,0);
  double t7=now(); madvise(r,n,23); memset(r,3,n); double t8=now();
  printf("per page us: fallocate %.2f | fault+write %.2f | read faults %.2f | populate_write+write %.2f\n",
   (t1-t0)*1e6/np,(t3-t2)*1e6/np,(t6-t5)*1e6/np,(t8-t7)*1e6/np);
  munmap(p,n);munmap(q,n);munmap(r,n);close(fd);}
}
