/* placeholder until sdk/browser builds it */
