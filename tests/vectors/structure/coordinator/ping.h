/* ping.h */
int ping(int n);
