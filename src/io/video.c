/* video.c - videos in: a file decoded by FFmpeg's libraries, or a folder of
 * PNG / JPEG frames (docs/reference.md, "Videos").
 *
 * A video is untrusted input. The file must be a regular file no larger
 * than the limit; FFmpeg reads it through our own I/O callbacks on the
 * file descriptor (no protocol, no URL, no other file: a playlist or a
 * reference that would open another file is refused by io_open), from a
 * list of container formats; the first video stream is decoded in
 * software on one thread with AV_EF_EXPLODE, so that a decoder's
 * "concealed" error is an error. The declared size is checked before the
 * decoder opens, every frame's before it is converted, and the count of
 * frames and their times as they come. FFmpeg logs nothing (its log level
 * is set to quiet once, process-wide): a failure is one line from
 * ra_last_error().
 *
 * Opening reads the stream's packets without decoding them (but the
 * first frame, for the size): a frame a packet, their times the packets'
 * presentation times in increasing order, as torchvision's
 * read_video_timestamps and decord's index count them (a container's
 * declared count is a claim, checked against the packets);
 * ra_video_decode decodes from the start up to the last frame asked for,
 * converts only those, and refuses a stream whose decoder gives fewer
 * frames than it has packets. Frame i is the i-th frame the decoder
 * outputs (presentation order), as PyAV, decord and the ffmpeg command
 * number them.
 *
 * RGB: libswscale from the decoder's pixel format to RGB24 at the same
 * size with the ffmpeg command's defaults (bicubic flags, the frame's
 * colour matrix, BT.601 when unspecified, and its range; "yuvj" formats
 * full range), so that `ffmpeg -i V -pix_fmt rgb24 f%d.png` gives the
 * same bytes (tests/test_video.sh). */
#define _POSIX_C_SOURCE 200809L
#include "base/internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dlfcn.h>
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>

#define IO_BUF 65536
/* The containers read: what cameras, phones, Kinetics and the web give. */
#define FORMATS "mov,mp4,m4a,3gp,3g2,mj2,matroska,webm,avi,mpeg,mpegts,ivf,flv,nut,mjpeg," \
                "mpjpeg,h264,hevc,m4v,ogg,gif,yuv4mpegpipe"
#define FOLDER_MAX_FRAMES 1000000

struct ra_video {
    char *path;
    int folder;
    char **names;        /* folder: the frames' paths, in name order */
    double *times;       /* (frames) seconds; NAN for a folder */
    ra_video_info info;
    ra_video_limits lim;
    char codec[32], format[64];
};

void ra_video_limits_default(ra_video_limits *l) {
    if (!l) return;
    *l = (ra_video_limits){.max_bytes = (int64_t)4 << 30, .max_pixels = (int64_t)64 << 20,
                           .max_frames = 1000000, .max_seconds = 4 * 3600.0};
}

/* ---- FFmpeg's libraries, opened at the first video ------------------------------------
 *
 * Not linked: linked, libavcodec brings some 140 shared objects into every
 * process (its codecs' libraries: dav1d, rav1e, libjxl, libhwy ...), 87 ms
 * of start-up for `relattn index` on the AMD EPYC Zen 5 of 2026-11-28, and
 * libhwy's constructor stops valgrind. They are opened by the soname of the
 * headers' major version (whose ABI FFmpeg keeps), once per process and
 * never closed, and each function taken from its own library. */
#define FF_FUNCS(X) \
    X(avutil, av_log_set_level) \
    X(avutil, av_strerror) \
    X(avutil, av_malloc) \
    X(avutil, av_free) \
    X(avutil, av_freep) \
    X(avutil, av_dict_set) \
    X(avutil, av_dict_free) \
    X(avutil, av_frame_alloc) \
    X(avutil, av_frame_free) \
    X(avutil, av_frame_unref) \
    X(avutil, av_pix_fmt_desc_get) \
    X(avcodec, av_packet_alloc) \
    X(avcodec, av_packet_free) \
    X(avcodec, av_packet_unref) \
    X(avcodec, avcodec_alloc_context3) \
    X(avcodec, avcodec_find_decoder) \
    X(avcodec, avcodec_free_context) \
    X(avcodec, avcodec_get_name) \
    X(avcodec, avcodec_open2) \
    X(avcodec, avcodec_parameters_to_context) \
    X(avcodec, avcodec_receive_frame) \
    X(avcodec, avcodec_send_packet) \
    X(avformat, av_read_frame) \
    X(avformat, avformat_alloc_context) \
    X(avformat, avformat_close_input) \
    X(avformat, avformat_find_stream_info) \
    X(avformat, avformat_open_input) \
    X(avformat, avio_alloc_context) \
    X(avformat, avio_context_free) \
    X(swscale, sws_freeContext) \
    X(swscale, sws_getCoefficients) \
    X(swscale, sws_getContext) \
    X(swscale, sws_isSupportedInput) \
    X(swscale, sws_scale) \
    X(swscale, sws_setColorspaceDetails)

#define FF_STR_(x) #x
#define FF_STR(x) FF_STR_(x)
/* in the order of their dependencies */
#define FF_LIBS(X) \
    X(avutil, LIBAVUTIL_VERSION_MAJOR) \
    X(swscale, LIBSWSCALE_VERSION_MAJOR) \
    X(avcodec, LIBAVCODEC_VERSION_MAJOR) \
    X(avformat, LIBAVFORMAT_VERSION_MAJOR)

static struct {
#define FF_FIELD(lib, f) __typeof__(f) *f;
    FF_FUNCS(FF_FIELD)
#undef FF_FIELD
} ff;
static char ff_error[512];   /* empty once loaded */

static void ff_load_once(void) {
#define FF_OPEN(lib, major)                                                                   \
    void *lib = dlopen("lib" #lib ".so." FF_STR(major), RTLD_NOW | RTLD_LOCAL);              \
    if (!lib) {                                                                               \
        const char *e = dlerror();                                                            \
        snprintf(ff_error, sizeof ff_error, "%s", e ? e : "lib" #lib ".so." FF_STR(major));   \
        return;                                                                               \
    }
    FF_LIBS(FF_OPEN)
#undef FF_OPEN
#define FF_SYM(lib, f)                                                                        \
    if (!(*(void **)&ff.f = dlsym(lib, #f))) {                                                \
        snprintf(ff_error, sizeof ff_error, "lib" #lib " has no " #f);                        \
        return;                                                                               \
    }
    FF_FUNCS(FF_SYM)
#undef FF_SYM
    ff.av_log_set_level(AV_LOG_QUIET);   /* failures are our one line */
}

/* FFmpeg ready, or why not (65: the video cannot be read here). */
static ra_status ff_load(const char *path) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, ff_load_once);
    if (ff_error[0])
        return rai_fail(RA_ERR_FORMAT, "video '%s': FFmpeg's libraries cannot be loaded (%s; "
                        "Debian: apt-get install libavformat" FF_STR(LIBAVFORMAT_VERSION_MAJOR)
                        " libswscale" FF_STR(LIBSWSCALE_VERSION_MAJOR) ")", path, ff_error);
    return RA_OK;
}

static const char *av_text(int e, char *buf, size_t n) {
    if (ff.av_strerror(e, buf, n) < 0) snprintf(buf, n, "error %d", e);
    return buf;
}

/* ---- a file through FFmpeg ------------------------------------------------------- */

typedef struct {
    int fd;
    int64_t size;
    AVFormatContext *fmt;
    AVIOContext *io;
    AVCodecContext *dec;
    AVPacket *pkt;
    AVFrame *frame;
    int stream;
    /* opening: the times of the stream's packets as they are read (NULL:
     * not kept), seconds (NAN without a time) */
    double *times, tb, max_seconds;
    int64_t npkt, cap, max_frames;
} source;

static int io_read(void *opaque, uint8_t *buf, int n) {
    source *s = opaque;
    const ssize_t r = read(s->fd, buf, (size_t)n);
    if (r < 0) return AVERROR(errno);
    return r == 0 ? AVERROR_EOF : (int)r;
}

static int64_t io_seek(void *opaque, int64_t off, int whence) {
    source *s = opaque;
    if (whence & AVSEEK_SIZE) return s->size;
    const off_t r = lseek(s->fd, (off_t)off, whence & ~AVSEEK_FORCE);
    return r < 0 ? AVERROR(errno) : (int64_t)r;
}

/* No other file, URL or protocol: a demuxer that wants one gets EPERM. */
static int io_open_refused(struct AVFormatContext *s, AVIOContext **pb, const char *url, int flags,
                           AVDictionary **options) {
    return AVERROR(EPERM);
}

/* (FFmpeg's calls only on what FFmpeg made: before ff_load, nothing was) */
static void source_close(source *s) {
    if (s->dec) ff.avcodec_free_context(&s->dec);
    if (s->pkt) ff.av_packet_free(&s->pkt);
    if (s->frame) ff.av_frame_free(&s->frame);
    if (s->fmt) ff.avformat_close_input(&s->fmt);   /* frees fmt, not our pb */
    if (s->io) ff.av_freep(&s->io->buffer), ff.avio_context_free(&s->io);
    if (s->fd >= 0) close(s->fd);
    s->fd = -1;
}

static ra_status fail_av(const char *path, const char *what, int e) {
    char b[128];
    if (e == AVERROR(ENOMEM))
        return rai_fail(RA_ERR_NOMEM, "video '%s': out of memory", path);
    return rai_fail(RA_ERR_FORMAT, "video '%s': %s (%s)", path, what, av_text(e, b, sizeof b));
}

static ra_status source_open(source *s, const char *path, const ra_video_limits *lim, char *codec,
                             size_t ncodec, char *format, size_t nformat) {
    *s = (source){.fd = -1, .stream = -1};
    struct stat sb;
    /* non-blocking until it is known to be a regular file (a FIFO would
     * wait for a writer) */
    if ((s->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)) < 0)
        return rai_fail(RA_ERR_IO, "cannot open video '%s': %s", path, strerror(errno));
    if (fstat(s->fd, &sb) || !S_ISREG(sb.st_mode) ||
        fcntl(s->fd, F_SETFL, fcntl(s->fd, F_GETFL) & ~O_NONBLOCK) < 0) {
        source_close(s);
        return rai_fail(RA_ERR_IO, "video '%s': not a regular file", path);
    }
    rai_note_read(s->fd, path);
    s->size = (int64_t)sb.st_size;
    if (s->size > lim->max_bytes) {
        source_close(s);
        return rai_fail(RA_ERR_FORMAT, "video '%s' is %lld bytes, above the limit of %lld", path,
                        (long long)s->size, (long long)lim->max_bytes);
    }
    ra_status st = ff_load(path);
    if (st) {
        source_close(s);
        return st;
    }
    uint8_t *buf = ff.av_malloc(IO_BUF);
    if (!buf || !(s->io = ff.avio_alloc_context(buf, IO_BUF, 0, s, io_read, NULL, io_seek)) ||
        !(s->fmt = ff.avformat_alloc_context()) || !(s->pkt = ff.av_packet_alloc()) ||
        !(s->frame = ff.av_frame_alloc())) {
        if (!s->io) ff.av_free(buf);
        source_close(s);
        return rai_fail(RA_ERR_NOMEM, "video '%s': out of memory", path);
    }
    s->fmt->pb = s->io;
    s->fmt->flags |= AVFMT_FLAG_CUSTOM_IO;
    s->fmt->io_open = io_open_refused;
    AVDictionary *opt = NULL;
    ff.av_dict_set(&opt, "format_whitelist", FORMATS, 0);
    ff.av_dict_set(&opt, "protocol_whitelist", "none", 0);
    AVFormatContext *fmt = s->fmt;
    int e = ff.avformat_open_input(&fmt, NULL, NULL, &opt);
    ff.av_dict_free(&opt);
    if (e < 0) {
        s->fmt = NULL;   /* freed by avformat_open_input */
        source_close(s);
        return fail_av(path, "not a video FFmpeg reads", e);
    }
    const AVCodec *codec_ = NULL;
    if ((e = ff.avformat_find_stream_info(s->fmt, NULL)) < 0)
        st = fail_av(path, "cannot read the stream information", e);
    /* the first video stream, as PyAV's streams.video[0] and decord */
    AVStream *vs = NULL;
    for (unsigned i = 0; !st && !vs && i < s->fmt->nb_streams; i++)
        if (s->fmt->streams[i]->codecpar->codec_type == AVMEDIA_TYPE_VIDEO)
            vs = s->fmt->streams[s->stream = (int)i];
    if (!st && !vs) st = rai_fail(RA_ERR_FORMAT, "video '%s': no video stream", path);
    if (!st) {
        const AVCodecParameters *p = vs->codecpar;
        snprintf(format, nformat, "%s", s->fmt->iformat->name);
        snprintf(codec, ncodec, "%s", ff.avcodec_get_name(p->codec_id));
        if (p->width < 0 || p->height < 0 || p->width > RA_IMAGE_MAX_SIDE ||
            p->height > RA_IMAGE_MAX_SIDE || (int64_t)p->width * p->height > lim->max_pixels)
            st = rai_fail(RA_ERR_FORMAT, "video '%s' is %dx%d, above the limit of %lld pixels "
                          "(and %d a side)", path, p->width, p->height, (long long)lim->max_pixels,
                          RA_IMAGE_MAX_SIDE);
        else if (vs->nb_frames > lim->max_frames)
            st = rai_fail(RA_ERR_FORMAT, "video '%s' declares %lld frames, above the limit of %lld",
                          path, (long long)vs->nb_frames, (long long)lim->max_frames);
        else if (s->fmt->duration != AV_NOPTS_VALUE &&
                 s->fmt->duration / (double)AV_TIME_BASE > lim->max_seconds)
            st = rai_fail(RA_ERR_FORMAT, "video '%s' lasts %.0f s, above the limit of %.0f s", path,
                          s->fmt->duration / (double)AV_TIME_BASE, lim->max_seconds);
        else if (!(codec_ = ff.avcodec_find_decoder(p->codec_id)))
            st = rai_fail(RA_ERR_FORMAT, "video '%s': no decoder for its codec (%s)", path, codec);
        else if (!(s->dec = ff.avcodec_alloc_context3(codec_)))
            st = rai_fail(RA_ERR_NOMEM, "video '%s': out of memory", path);
        else if ((e = ff.avcodec_parameters_to_context(s->dec, p)) < 0)
            st = fail_av(path, "bad codec parameters", e);
    }
    if (!st) {
        s->dec->thread_count = 1;
        s->dec->err_recognition |= AV_EF_EXPLODE | AV_EF_CRCCHECK;
        s->dec->max_pixels = lim->max_pixels;
        s->dec->pkt_timebase = vs->time_base;
        if ((e = ff.avcodec_open2(s->dec, codec_, NULL)) < 0)
            st = fail_av(path, "cannot open its decoder", e);
    }
    if (st) source_close(s);
    return st;
}

/* s->pkt, a packet of the stream, into the log of its times (when kept):
 * 0, or -1 with *st. */
static int source_log(source *s, const char *path, ra_status *st) {
    if (s->pkt->flags & AV_PKT_FLAG_CORRUPT) {
        *st = rai_fail(RA_ERR_FORMAT, "video '%s': corrupt packet", path);
        return -1;
    }
    if (!s->times) return 0;
    if (s->npkt == s->max_frames) {
        *st = rai_fail(RA_ERR_FORMAT, "video '%s': more than %lld frames", path,
                       (long long)s->max_frames);
        return -1;
    }
    const int64_t p = s->pkt->pts != AV_NOPTS_VALUE ? s->pkt->pts : s->pkt->dts;
    const double t = p == AV_NOPTS_VALUE ? NAN : p * s->tb;
    if (isfinite(t) && fabs(t) > s->max_seconds) {
        *st = rai_fail(RA_ERR_FORMAT, "video '%s': a frame at %.0f s, beyond the limit of %.0f s",
                       path, t, s->max_seconds);
        return -1;
    }
    if (s->npkt == s->cap) {
        double *g = realloc(s->times, sizeof *g * (size_t)(s->cap *= 2));
        if (!g) {
            *st = rai_fail(RA_ERR_NOMEM, "video '%s': out of memory", path);
            return -1;
        }
        s->times = g;
    }
    s->times[s->npkt++] = t;
    return 0;
}

/* The next frame into s->frame: 1, 0 at the end, or an error. */
static int source_next(source *s, const char *path, ra_status *st) {
    char b[128];
    for (;;) {
        int e = ff.avcodec_receive_frame(s->dec, s->frame);
        if (e == 0) {
            if (s->frame->flags & AV_FRAME_FLAG_CORRUPT || s->frame->decode_error_flags) {
                *st = rai_fail(RA_ERR_FORMAT, "video '%s': corrupt frame", path);
                return -1;
            }
            return 1;
        }
        if (e == AVERROR_EOF) return 0;
        if (e != AVERROR(EAGAIN)) {
            *st = fail_av(path, "corrupt stream", e);
            return -1;
        }
        while ((e = ff.av_read_frame(s->fmt, s->pkt)) >= 0 && s->pkt->stream_index != s->stream)
            ff.av_packet_unref(s->pkt);
        if (e == AVERROR_EOF) {
            e = ff.avcodec_send_packet(s->dec, NULL);   /* drain */
        } else if (e < 0) {
            *st = fail_av(path, "cannot read the file", e);
            return -1;
        } else {
            if (source_log(s, path, st)) {
                ff.av_packet_unref(s->pkt);
                return -1;
            }
            e = ff.avcodec_send_packet(s->dec, s->pkt);
            ff.av_packet_unref(s->pkt);
        }
        if (e < 0 && e != AVERROR_EOF) {
            *st = rai_fail(RA_ERR_FORMAT, "video '%s': corrupt stream (%s)", path,
                           av_text(e, b, sizeof b));
            return -1;
        }
    }
}

static ra_status frame_check(const AVFrame *f, const ra_video *v, int64_t i) {
    if (f->width != v->info.width || f->height != v->info.height)
        return rai_fail(RA_ERR_FORMAT, "video '%s': frame %lld is %dx%d, the first %dx%d", v->path,
                        (long long)i, f->width, f->height, v->info.width, v->info.height);
    if (f->format < 0 || !ff.av_pix_fmt_desc_get(f->format) ||
        !ff.sws_isSupportedInput((enum AVPixelFormat)f->format))
        return rai_fail(RA_ERR_FORMAT, "video '%s': pixel format %d is not converted", v->path,
                        f->format);
    return RA_OK;
}

static int by_time(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The frames are counted by the stream's packets, a frame each, and their
 * times are the packets' presentation times in increasing order (as
 * torchvision's read_video_timestamps and decord's index count them),
 * without decoding them: opening costs a demuxing pass, not a decoding
 * one. Only the first frame is decoded, for the frames' size (the
 * decoder's, which a container may state otherwise). ra_video_decode
 * checks that the decoder gives each frame it is asked for. */
static ra_status open_file(ra_video *v) {
    source s;
    ra_status st = source_open(&s, v->path, &v->lim, v->codec, sizeof v->codec, v->format,
                               sizeof v->format);
    if (st) return st;
    const AVStream *vs = s.fmt->streams[s.stream];
    v->info.width = vs->codecpar->width, v->info.height = vs->codecpar->height;
    AVRational r = vs->avg_frame_rate.num > 0 && vs->avg_frame_rate.den > 0 ? vs->avg_frame_rate
                                                                            : vs->r_frame_rate;
    v->info.fps = r.num > 0 && r.den > 0 ? av_q2d(r) : 0;
    s.tb = av_q2d(vs->time_base), s.max_seconds = v->lim.max_seconds;
    s.max_frames = v->lim.max_frames, s.cap = 256;
    if (!(s.times = malloc(sizeof *s.times * (size_t)s.cap))) {
        source_close(&s);
        return rai_fail(RA_ERR_NOMEM, "video '%s': out of memory", v->path);
    }
    const int k = source_next(&s, v->path, &st);
    if (k == 0) st = rai_fail(RA_ERR_FORMAT, "video '%s': no frame decoded", v->path);
    if (k == 1 && (s.frame->width != v->info.width || s.frame->height != v->info.height)) {
        v->info.width = s.frame->width, v->info.height = s.frame->height;   /* the decoder's */
        if (v->info.width < 1 || v->info.height < 1 || v->info.width > RA_IMAGE_MAX_SIDE ||
            v->info.height > RA_IMAGE_MAX_SIDE ||
            (int64_t)v->info.width * v->info.height > v->lim.max_pixels)
            st = rai_fail(RA_ERR_FORMAT, "video '%s': frames of %dx%d, above the limit", v->path,
                          v->info.width, v->info.height);
    }
    if (!st) st = frame_check(s.frame, v, 0);
    int e = 0;
    while (!st && (e = ff.av_read_frame(s.fmt, s.pkt)) >= 0) {
        if (s.pkt->stream_index == s.stream) source_log(&s, v->path, &st);
        ff.av_packet_unref(s.pkt);
    }
    if (!st && e != AVERROR_EOF) st = fail_av(v->path, "cannot read the file", e);
    const int64_t n = s.npkt;
    if (!st && vs->nb_frames > 0 && n < vs->nb_frames)
        st = rai_fail(RA_ERR_FORMAT, "video '%s': truncated (%lld of the %lld frames it declares)",
                      v->path, (long long)n, (long long)vs->nb_frames);
    if (!st) {
        int timed = 1;
        for (int64_t i = 0; i < n; i++) timed &= !isnan(s.times[i]);
        if (timed) qsort(s.times, (size_t)n, sizeof *s.times, by_time);
        else for (int64_t i = 0; i < n; i++) s.times[i] = NAN;   /* some untimed: none known */
        v->times = s.times, s.times = NULL;
        v->info.frames = n;
    }
    free(s.times);
    source_close(&s);
    return st;
}

/* ---- a folder of frames ------------------------------------------------------------- */

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int frame_name(const char *s) {
    static const char *const ext[] = {".png", ".jpg", ".jpeg"};
    const size_t n = strlen(s);
    for (size_t i = 0; i < sizeof ext / sizeof *ext; i++) {
        const size_t k = strlen(ext[i]);
        if (n > k && !strcasecmp(s + n - k, ext[i])) return 1;
    }
    return 0;
}

static ra_status open_folder(ra_video *v) {
    DIR *d = opendir(v->path);
    if (!d) return rai_fail(RA_ERR_IO, "cannot open the frame folder '%s'", v->path);
    ra_status st = RA_OK;
    int64_t n = 0, cap = 0;
    const int64_t most = v->lim.max_frames < FOLDER_MAX_FRAMES ? v->lim.max_frames
                                                               : FOLDER_MAX_FRAMES;
    struct dirent *e;
    while (!st && (e = readdir(d))) {
        if (e->d_name[0] == '.' || !frame_name(e->d_name)) continue;
        if (n == most) {
            st = rai_fail(RA_ERR_FORMAT, "frame folder '%s': more than %lld frames", v->path,
                          (long long)most);
            break;
        }
        char *p = malloc(strlen(v->path) + strlen(e->d_name) + 2);
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **g = realloc(v->names, sizeof *g * (size_t)cap);
            if (g) v->names = g;
            else free(p), p = NULL;
        }
        if (!p) {
            st = rai_fail(RA_ERR_NOMEM, "frame folder '%s': out of memory", v->path);
            break;
        }
        sprintf(p, "%s/%s", v->path, e->d_name);
        v->names[n++] = p;
    }
    closedir(d);
    v->info.frames = n;
    if (st) return st;
    if (n == 0) return rai_fail(RA_ERR_FORMAT, "frame folder '%s': no PNG or JPEG file", v->path);
    qsort(v->names, (size_t)n, sizeof *v->names, by_name);
    uint8_t *px = NULL;
    int w, h;
    if ((st = ra_image_load_u8(&px, &w, &h, v->names[0], v->lim.max_pixels))) return st;
    free(px);
    if (w > RA_IMAGE_MAX_SIDE || h > RA_IMAGE_MAX_SIDE)
        return rai_fail(RA_ERR_FORMAT, "frame '%s': %dx%d", v->names[0], w, h);
    if (!(v->times = malloc(sizeof *v->times * (size_t)n)))
        return rai_fail(RA_ERR_NOMEM, "frame folder '%s': out of memory", v->path);
    for (int64_t i = 0; i < n; i++) v->times[i] = NAN;
    v->info.width = w, v->info.height = h, v->info.fps = 0;
    snprintf(v->codec, sizeof v->codec, "images");
    snprintf(v->format, sizeof v->format, "folder");
    return RA_OK;
}

/* ---- the public calls ---------------------------------------------------------------- */

ra_status ra_video_open(ra_video **out, const char *path, const ra_video_limits *lim) {
    if (!out || !path) return rai_fail(RA_ERR_ARG, "ra_video_open: NULL argument");
    *out = NULL;
    ra_video *v = calloc(1, sizeof *v);
    if (!v || !(v->path = malloc(strlen(path) + 1))) {
        free(v);
        return rai_fail(RA_ERR_NOMEM, "video '%s': out of memory", path);
    }
    strcpy(v->path, path);
    if (lim) v->lim = *lim;
    else ra_video_limits_default(&v->lim);
    if (v->lim.max_pixels < 1 || v->lim.max_frames < 1 || v->lim.max_bytes < 0 ||
        !(v->lim.max_seconds > 0)) {
        ra_video_free(v);
        return rai_fail(RA_ERR_ARG, "ra_video_open: limits must be positive");
    }
    struct stat sb;
    ra_status st;
    if (stat(path, &sb)) st = rai_fail(RA_ERR_IO, "cannot open video '%s': %s", path, strerror(errno));
    else if (S_ISDIR(sb.st_mode)) v->folder = 1, st = open_folder(v);
    else st = open_file(v);
    if (st) {
        ra_video_free(v);
        return st;
    }
    v->info.codec = v->codec, v->info.format = v->format;
    *out = v;
    return RA_OK;
}

void ra_video_free(ra_video *v) {
    if (!v) return;
    for (int64_t i = 0; v->names && i < v->info.frames; i++) free(v->names[i]);
    free(v->names), free(v->times), free(v->path), free(v);
}

const ra_video_info *ra_video_get_info(const ra_video *v) { return v ? &v->info : NULL; }

const double *ra_video_times(const ra_video *v) { return v ? v->times : NULL; }

/* Which of the frames 0..n-1 are wanted (a byte each). */
static ra_status wanted(uint8_t **want, const ra_video *v, const int64_t *idx, int64_t n) {
    *want = calloc((size_t)v->info.frames, 1);
    if (!*want) return rai_fail(RA_ERR_NOMEM, "video '%s': out of memory", v->path);
    for (int64_t i = 0; i < n; i++) {
        if (idx[i] < 0 || idx[i] >= v->info.frames) {
            free(*want), *want = NULL;
            return rai_fail(RA_ERR_ARG, "video '%s': frame %lld of %lld", v->path,
                            (long long)idx[i], (long long)v->info.frames);
        }
        (*want)[idx[i]] = 1;
    }
    return RA_OK;
}

static ra_status decode_folder(ra_video *v, const uint8_t *want, ra_video_frame_fn fn, void *ctx) {
    ra_status st = RA_OK;
    for (int64_t i = 0; !st && i < v->info.frames; i++) {
        if (!want[i]) continue;
        uint8_t *px = NULL;
        int w, h;
        if (!(st = ra_image_load_u8(&px, &w, &h, v->names[i], v->lim.max_pixels))) {
            if (w != v->info.width || h != v->info.height)
                st = rai_fail(RA_ERR_FORMAT, "frame '%s' is %dx%d, the first %dx%d", v->names[i], w,
                              h, v->info.width, v->info.height);
            else
                st = fn(ctx, i, px, w, h);
        }
        free(px);
    }
    return st;
}

static ra_status decode_file(ra_video *v, const uint8_t *want, ra_video_frame_fn fn, void *ctx) {
    source s;
    char codec[32], format[64];
    ra_status st = source_open(&s, v->path, &v->lim, codec, sizeof codec, format, sizeof format);
    if (st) return st;
    const int w = v->info.width, h = v->info.height;
    /* swscale's vector code writes past a row's end (whole blocks of
     * pixels): rows of a padded stride, one spare row, compacted after */
    const int pitch = (3 * w + 63) & ~63;
    uint8_t *rgb = malloc((size_t)pitch * (h + 1));
    struct SwsContext *sws = NULL;
    int sws_fmt = -1, sws_full = -1, sws_space = -1;
    if (!rgb) st = rai_fail(RA_ERR_NOMEM, "video '%s': out of memory", v->path);
    int64_t i = 0, last = v->info.frames - 1;
    while (last >= 0 && !want[last]) last--;
    int k = 0;
    while (!st && i <= last && (k = source_next(&s, v->path, &st)) == 1) {
        if ((st = frame_check(s.frame, v, i))) break;
        if (want[i]) {
            const AVFrame *f = s.frame;
            const AVPixFmtDescriptor *d = ff.av_pix_fmt_desc_get(f->format);
            const int yuv = !(d->flags & AV_PIX_FMT_FLAG_RGB) && d->nb_components >= 3;
            const int full = f->color_range == AVCOL_RANGE_JPEG || f->format == AV_PIX_FMT_YUVJ420P ||
                             f->format == AV_PIX_FMT_YUVJ422P || f->format == AV_PIX_FMT_YUVJ444P ||
                             f->format == AV_PIX_FMT_YUVJ440P || f->format == AV_PIX_FMT_YUVJ411P;
            const int space = f->colorspace == AVCOL_SPC_UNSPECIFIED || f->colorspace == AVCOL_SPC_RGB
                                  ? SWS_CS_DEFAULT : (int)f->colorspace;
            if (!sws || f->format != sws_fmt || full != sws_full || space != sws_space) {
                ff.sws_freeContext(sws);
                sws = ff.sws_getContext(w, h, (enum AVPixelFormat)f->format, w, h, AV_PIX_FMT_RGB24,
                                     SWS_BICUBIC, NULL, NULL, NULL);
                if (sws && yuv)
                    ff.sws_setColorspaceDetails(sws, ff.sws_getCoefficients(space), full,
                                             ff.sws_getCoefficients(SWS_CS_DEFAULT), 1, 0, 1 << 16,
                                             1 << 16);
                sws_fmt = f->format, sws_full = full, sws_space = space;
                if (!sws) {
                    st = rai_fail(RA_ERR_FORMAT, "video '%s': cannot convert %s to RGB", v->path,
                                  d->name);
                    break;
                }
            }
            uint8_t *dst[4] = {rgb, NULL, NULL, NULL};
            int stride[4] = {pitch, 0, 0, 0};
            if (ff.sws_scale(sws, (const uint8_t *const *)f->data, f->linesize, 0, h, dst, stride) != h)
                st = rai_fail(RA_ERR_FORMAT, "video '%s': frame %lld not converted", v->path,
                              (long long)i);
            for (int y = 1; y < h; y++)
                memmove(rgb + (size_t)y * 3 * w, rgb + (size_t)y * pitch, (size_t)3 * w);
            if (!st) st = fn(ctx, i, rgb, w, h);
        }
        ff.av_frame_unref(s.frame);
        i++;
    }
    if (!st && i <= last)   /* fewer frames than packets, or a file changed since */
        st = rai_fail(RA_ERR_FORMAT, "video '%s': the stream ends after %lld frames, before frame "
                      "%lld (of the %lld it has packets for)", v->path, (long long)i,
                      (long long)last, (long long)v->info.frames);
    ff.sws_freeContext(sws);
    free(rgb);
    source_close(&s);
    return st;
}

ra_status ra_video_decode(ra_video *v, const int64_t *idx, int64_t n, ra_video_frame_fn fn,
                          void *ctx) {
    if (!v || (!idx && n) || n < 0 || !fn)
        return rai_fail(RA_ERR_ARG, "ra_video_decode: NULL argument");
    uint8_t *want;
    ra_status st = wanted(&want, v, idx, n);
    if (st) return st;
    st = v->folder ? decode_folder(v, want, fn, ctx) : decode_file(v, want, fn, ctx);
    free(want);
    return st;
}
