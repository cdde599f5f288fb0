"""The dashboard's private session keys, declared in one place: each is set by one module and read or
popped by another (often across a st.switch_page or a rerun), so both sides use these names.

A leading underscore marks a key no widget owns: Streamlit never clears it, and the URL never shows it.
Widget keys (layer, head, prompt, ...) are the widgets' own and are not listed here.
"""

# The URL and switching between pages (state.py, app.py, views that switch)
URL_READ = "_url_read"  # this session has applied the URL's choices once; later reruns keep the widgets'
URL_WRITTEN = "_url_written"  # the choices this session last wrote to the URL (a different URL is a link)
SWITCH_CHOICES = "_switch_choices"  # sidebar choices a page leaves before st.switch_page, restored after
URL_VIEW = "_url_view"  # the link's layer / head / position, held to the model once by the sidebar (named if not)
POSITION_FOR = "_position_for"  # (source, prompt) the position slider was set for: a new prompt resets it
SIDEBAR_FOR_PRESENTATION = "_sidebar_for_presentation"  # the presentation flag the sidebar state was set for

# Uploads (sidebar.py)
UPLOADS = "_uploads"  # this session's SessionUploads owner: its bytes go when the session does
SAE_UPLOADS = "_sae_uploads"  # this session's SAE upload owner (saes.py), apart from its checkpoint's
UPLOAD_NAMES = "_upload_names"  # the uploaded files' names, shown when the uploader is empty after a rerun
UPLOADS_CARRIED = "_uploads_carried"  # the uploaders whose files a st.switch_page carried over (uploads.py)

# Classroom: forward-pass steps, lessons, following a teacher (classroom.py, slides.py)
STEP_URL_READ = "_step_url_read"  # the ?step=&block= of the URL has been applied once
STEP_WRITTEN = "_step_written"  # the (step, block) this session last wrote to the URL
LESSON = "_lesson"  # the open Lesson (a small frozen record, no tensors)
LESSON_WRITTEN = "_lesson_written"  # the (lesson, slide) this session last wrote to the URL
LESSON_ERROR = "_lesson_error"  # a ?lesson= that could not be opened: one line, shown once by the Lesson page
CLASS_CODE = "_class_code"  # the code a teacher's live lesson is shared under
FOLLOW_VERSION = "_follow_version"  # the live lesson's version a follower's page shows (a newer one reruns)
TEACH_KEY = "_teach_key"  # the teacher key of this session's class, also in its URL (?teach=KEY)
POLL_VOTER = "_poll_voter"  # a follower's random voter token: one answer per poll per follower session (predict.py)
TEACH_ERROR = "_teach_error"  # why Start teaching made no code (the server or this computer is full)

# Steering (steering_panel.py; state.py reads and writes it as ?steer=)
STEER = "_steer"  # the session's SteeringSpec (None: off), kept across pages that do not draw the panel
STEER_ERROR = "_steer_error"  # why a link's ?steer= was not used: one line, shown once by the panel

# Pages (views/)
HEADS_OPEN_ATTENTION = "_heads_open_attention"  # Heads: a click asked to open its head in Attention
CORPUS_OPEN = "_corpus_open"  # Corpus: the page key an "open as prompt" click asked for
CORPUS_PROMPT = "_corpus_prompt"  # Corpus: the prompt that click opens
CORPUS_DONE = "_corpus_done"  # Corpus: the folder of a scan this page started that has ended (opened next run)
CORPUS_MINE = "_corpus_mine"  # Corpus: the folders of the scans this session's page ran, offered as scan B
TIMELINE_PROMPT_FOR = "_tl_prompt_for"  # Timeline: the run folder whose default prompt the box was set to
CORPUS_PICK_TAKEN = "_corpus_pick_taken"  # the (token, row) of the token-neuron table last opened
