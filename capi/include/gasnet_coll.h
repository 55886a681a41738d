/* gasnet_coll.h: GASNet-1's collectives header. amnet's gasnet.h declares the collectives
 * (gasnet_coll_*) itself; a client that includes this header gets them from there. */

#ifndef AMNET_GASNET_COLL_H
#define AMNET_GASNET_COLL_H

#include "gasnet.h"

#endif
