/* Kernel floor of the RPC-over-RDMA depth-1 pattern on this machine: two
 * processes (fork) ping-pong 100 octets over loopback TCP, each waiting in
 * epoll_wait (edge-triggered) with timeout argv[1] ms (-1: none), argv[2]
 * round trips. Pin with `taskset -c 0` to match scripts/bench-compare.
 * Build: cc -O2 -o /tmp/epoll-pingpong scripts/epoll-pingpong.c
 * (BENCHMARKS.md, "Where the time goes in NULL at depth 1"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/epoll.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <time.h>
#include <sys/wait.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
int main(int argc,char**argv){
  int tmo=atoi(argv[1]); int n=atoi(argv[2]);
  int ls=socket(AF_INET,SOCK_STREAM,0); struct sockaddr_in a={0}; a.sin_family=AF_INET; a.sin_addr.s_addr=htonl(0x7f000001);
  bind(ls,(void*)&a,sizeof a); listen(ls,1); socklen_t l=sizeof a; getsockname(ls,(void*)&a,&l);
  pid_t p=fork();
  int s; if(p==0){ s=accept(ls,0,0);} else { s=socket(AF_INET,SOCK_STREAM,0); connect(s,(void*)&a,sizeof a);} 
  int one=1; setsockopt(s,IPPROTO_TCP,TCP_NODELAY,&one,sizeof one);
  int ep=epoll_create1(0); struct epoll_event ev={.events=EPOLLIN|EPOLLET,.data.fd=s}; epoll_ctl(ep,EPOLL_CTL_ADD,s,&ev);
  char buf[256]; memset(buf,1,100); struct epoll_event out[4];
  double t0=now();
  for(int i=0;i<n;i++){
    if(p!=0){ write(s,buf,100); }
    for(;;){ int r=recv(s,buf,256,MSG_DONTWAIT); if(r>0)break; epoll_wait(ep,out,4,tmo);} 
    if(p==0){ write(s,buf,100); }
  }
  double t1=now();
  if(p!=0){ printf("timeout %d: %.0f rt/s\n",tmo,n/(t1-t0)); wait(0);} 
  return 0;
}
