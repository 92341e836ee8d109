/* low.h */
int low(void);
