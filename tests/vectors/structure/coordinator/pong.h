/* pong.h */
int pong(int n);
