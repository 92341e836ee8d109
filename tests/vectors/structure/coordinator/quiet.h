/* quiet.h */
void quiet(void);
