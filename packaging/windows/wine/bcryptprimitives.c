/* A stand-in for Windows' bcryptprimitives.dll, for Wine only (packaging/windows/build.py puts it
 * in a build or test prefix's system32; never bundled: Windows 10+ has the real one).
 *
 * Rust's standard library (1.78+) takes its random bytes from ProcessPrng in bcryptprimitives.dll,
 * which Wine 8 lacks: cryptography's _rust.pyd (pypdf's AES, PyInstaller's cryptography hook)
 * fails with "DLL load failed ... Module not found". ProcessPrng always succeeds; here it asks
 * RtlGenRandom (advapi32's SystemFunction036), which Wine implements.
 */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T size) {
    while (size > 0) {
        ULONG chunk = size > 0x40000000 ? 0x40000000 : (ULONG)size;
        if (!SystemFunction036(data, chunk)) return FALSE;
        data += chunk;
        size -= chunk;
    }
    return TRUE;
}
